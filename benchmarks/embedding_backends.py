"""Embedding backends against fp32 PyTorch on SciFact, in one run: throughput and dense nDCG@10.

    python benchmarks/embedding_backends.py [--quick] [--backends onnx-int8,onnx]

Every SciFact abstract (`--quick`: a 128-text sample, no nDCG) is embedded by fp32 PyTorch and by each candidate
backend with its default threads, taking turns block by block (256 texts, the first one alternating), so a change
of load hits all of them; the figure is the ratio of summed seconds over the same texts. Then the 300 test queries
are searched against each backend's own vectors: nDCG@10, and the difference to fp32. Targets: throughput >= 2.0x
fp32 and |nDCG@10 - fp32| <= 0.005. The vectors go to the project's embedding cache, so later runs reuse them.
Writes data/benchmarks/embedding_backends[_quick].json.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from common import PARQUET, Figure, add_common_options, load_average, machine, write_result

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.registry.corpora import load_corpus, load_corpus_registry
from causal_assets.core.measures.metrics import evaluate
from causal_assets.core.evaluation.runner import run_benchmark
from causal_assets.core.index.build import build_sparse, chunk_texts
from causal_assets.core.index.dense import DEFAULT_MODEL, Embedder, EmbeddingCache
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.factory import build_retriever
from causal_assets.settings import Settings

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

REFERENCE = "torch"
TARGET_RATIO = 2.0
TARGET_NDCG_DELTA = 0.005
BLOCK = 256


def run(quick: bool, backends: list[str], timed: int | None = None,
        reference_cache: Path | None = None) -> tuple[list[Figure], dict]:
    spec = load_corpus_registry(SETTINGS.corpora, SETTINGS.shared_data)["scifact"]
    chunks = chunks_to_frame(load_corpus(spec)[0])
    chunks = chunks.reset_index(drop=True).assign(chunk_idx=range(len(chunks)))
    texts, hashes = chunk_texts(chunks), chunks["content_hash"].tolist()
    sample = np.arange(len(texts))
    if quick:
        sample = np.sort(np.random.default_rng(0).choice(len(texts), 128, replace=False))
    names = [REFERENCE, *backends]
    embedders = {b: Embedder(DEFAULT_MODEL, 64, b) for b in names}
    load_s = {}
    for b, e in embedders.items():  # load (and for ONNX export once, cached) and warm up, untimed
        t0 = time.perf_counter()
        e.encode([texts[i] for i in sample[:16]])
        load_s[b] = round(time.perf_counter() - t0, 2)

    vectors = {b: np.zeros((len(texts), 384), np.float32) for b in names}
    seconds = {b: 0.0 for b in names}
    cpu_seconds = {b: 0.0 for b in names}
    blocks = []
    rng = np.random.default_rng(1)
    order = rng.permutation(sample)[:timed]  # blocks of a uniform sample: each holds the corpus's length mix
    for i, start in enumerate(range(0, len(order), BLOCK)):
        idx = order[start:start + BLOCK]
        block_texts = [texts[j] for j in idx]
        turn = names[i % len(names):] + names[:i % len(names)]
        row = {"texts": len(idx), "load_average": load_average()}
        for b in turn:
            c0, t0 = time.process_time(), time.perf_counter()
            vectors[b][idx] = embedders[b].encode(block_texts)
            dt = time.perf_counter() - t0
            seconds[b] += dt
            cpu_seconds[b] += time.process_time() - c0
            row[b] = round(dt, 3)
        blocks.append(row)
        print(f"block {i + 1}/{-(-len(order) // BLOCK)}: " + ", ".join(f"{b} {row[b]:.1f}s" for b in names)
              + f" (load {row['load_average'][0]})", flush=True)

    n = len(order)
    tps = {b: n / seconds[b] for b in names}
    untimed = {}
    if not quick and n < len(texts):  # the rest of the corpus, for nDCG: encoded untimed (or read, for the reference)
        rest = np.setdiff1d(np.arange(len(texts)), order)
        known = EmbeddingCache.for_embedder(reference_cache, embedders[REFERENCE]).load() if reference_cache else {}
        for b in names:
            todo = rest
            if b == REFERENCE and known:
                hit = np.array([hashes[i] in known for i in rest])
                for i in rest[hit]:
                    vectors[b][i] = known[hashes[i]]
                todo = rest[~hit]
            t0 = time.perf_counter()
            if len(todo):
                vectors[b][todo] = embedders[b].encode([texts[i] for i in todo])
            untimed[b] = {"encoded": int(len(todo)), "read_from_cache": int(len(rest) - len(todo)),
                          "seconds": round(time.perf_counter() - t0, 1)}
            print(f"untimed rest, {b}: {untimed[b]}", flush=True)
    details: dict = {
        "texts": int(n), "block": BLOCK, "reference": REFERENCE, "backends": backends, "model": DEFAULT_MODEL,
        "threads": {b: (embedders[b].model.threads if b != "torch" else _torch_threads()) for b in names},
        "load_and_warmup_s": load_s, "seconds": {b: round(s, 2) for b, s in seconds.items()},
        "cpu_seconds": {b: round(s, 2) for b, s in cpu_seconds.items()},
        "texts_per_second": {b: round(v, 2) for b, v in tps.items()},
        "texts_per_cpu_second": {b: round(n / cpu_seconds[b], 2) for b in names},
        "ratio_to_reference": {b: round(tps[b] / tps[REFERENCE], 3) for b in backends},
        "block_ratio_median": {b: round(float(np.median([r[REFERENCE] / r[b] for r in blocks])), 3)
                               for b in backends},
        "cosine_to_reference": {}, "blocks": blocks, "untimed_rest": untimed,
        "reference_cache": str(reference_cache) if reference_cache else None,
    }
    for b in backends:
        cos = np.einsum("ij,ij->i", vectors[b][order], vectors[REFERENCE][order])
        details["cosine_to_reference"][b] = {"min": round(float(cos.min()), 5), "mean": round(float(cos.mean()), 6),
                                             "p01": round(float(np.percentile(cos, 1)), 5)}
    figures = []
    ndcg = {}
    if not quick:
        registry = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)
        bench = load_benchmark(registry["scifact"], "test")
        sparse, _ = build_sparse(chunks, False)
        for b in names:
            index = CorpusIndex("scifact", chunks, sparse, vectors[b], False, embedders[b])
            rr = run_benchmark(build_retriever("dense", index), bench)
            metrics = evaluate(bench.qrels, rr.run, ks=(10,))
            ndcg[b] = float(metrics.loc[metrics["metric"] == "ndcg", "value"].iloc[0])
            EmbeddingCache.for_embedder(PARQUET / "cache" / "embeddings", embedders[b]).save("scifact", hashes,
                                                                                             vectors[b])
            # (the cache is keyed by content hash: vectors read from --reference-cache are the same fp32 vectors)
        details["ndcg@10"] = {b: round(v, 4) for b, v in ndcg.items()}
        details["queries"] = len(bench.query_ids())
    for b in backends:
        figures.append(Figure(f"embedding throughput, {b} / fp32 PyTorch, SciFact ({n} abstracts timed, same run)",
                              details["ratio_to_reference"][b], "x", TARGET_RATIO, ">=",
                              f"{b} {tps[b]:.1f} texts/s vs torch {tps[REFERENCE]:.1f} texts/s; per CPU-second "
                              f"{details['texts_per_cpu_second'][b]} vs {details['texts_per_cpu_second'][REFERENCE]}; "
                              f"threads {details['threads'][b]} vs {details['threads'][REFERENCE]}; "
                              f"min cosine to fp32 {details['cosine_to_reference'][b]['min']}"))
        if ndcg:
            figures.append(Figure(f"SciFact test dense nDCG@10, {b} minus fp32 PyTorch (same run)",
                                  round(abs(ndcg[b] - ndcg[REFERENCE]), 4), "", TARGET_NDCG_DELTA, "<=",
                                  f"{b} {ndcg[b]:.4f} vs torch {ndcg[REFERENCE]:.4f}"))
    return figures, details


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_options(ap)
    ap.add_argument("--backends", default="onnx-int8", help="comma-separated candidates besides fp32 torch")
    ap.add_argument("--timed", type=int, help="time only this many texts (a uniform sample); the rest of the corpus "
                                              "is still encoded, untimed, for nDCG (default: every text is timed)")
    ap.add_argument("--reference-cache", type=Path,
                    help="embedding cache root to read the untimed rest's fp32 torch vectors from (read only)")
    args = ap.parse_args()
    started = machine()
    figures, details = run(args.quick, [b for b in args.backends.split(",") if b], args.timed, args.reference_cache)
    write_result("embedding_backends", figures, details, started, args.quick, args.out)


if __name__ == "__main__":
    main()
