"""Dense query latency of the single-query path against a plain float product, at 10k and 100k chunks, in one run;
and the ANN's nprobe calibrated on real SciFact queries (recall@10 against exact search).

    python benchmarks/dense_latency.py [--quick] [--sizes 10000,100000] [--out DIR]

Corpus: SciFact's 5,183 real MiniLM vectors plus synthetic ones up to the size (random mixes of two real vectors
with a little noise). Queries: SciFact's 300 test queries, one by one, alternating which path goes first so load
changes hit both. Per size: search only (`CorpusIndex.dense_top_k` against one multi-threaded float product and
argpartition; both must return the same top 10), end to end with the query's embedding, and the ANN with its
default nprobe and one calibrated on 400 real train queries. Latencies are p50/p95 with wall and CPU time and the
load average. `--quick`: the vectors of the first 300 abstracts (embedded in a temporary directory), 5,000
chunks, 60 test and 100 train queries. Writes data/benchmarks/dense_latency[_quick].json.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from common import PARQUET, Figure, add_common_options, quick_base, latency_ms, load_average, machine, write_result

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.registry.corpora import load_corpus, load_corpus_registry
from causal_assets.core.index.ann import AnnConfig, AnnIndex, exact_top_k, recall_at_k
from causal_assets.core.index.build import chunk_texts
from causal_assets.core.index.dense import Embedder, EmbeddingCache
from causal_assets.core.index.search import CorpusIndex
from causal_assets.settings import Settings

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

TARGET_P50_MS = 5.0  # exact search at 100k chunks


def scifact_vectors(embedder: Embedder, cache_root: Path) -> np.ndarray:
    """SciFact's vectors on the embedder's backend from the embedding cache under `cache_root` (read only); chunks
    not found there are encoded."""
    chunks = chunks_to_frame(load_corpus(load_corpus_registry(SETTINGS.corpora, SETTINGS.shared_data)["scifact"])[0])
    known = EmbeddingCache.for_embedder(cache_root, embedder).load()
    hashes, texts = chunks["content_hash"].tolist(), chunk_texts(chunks)
    missing = [i for i, h in enumerate(hashes) if h not in known]
    if missing:
        known.update(zip([hashes[i] for i in missing], embedder.encode([texts[i] for i in missing])))
    print(f"SciFact vectors ({embedder.backend}): {len(missing)} encoded, {len(hashes) - len(missing)} from "
          f"{cache_root}", flush=True)
    return np.stack([known[h] for h in hashes]).astype(np.float32)


def synthetic(real: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    if n <= len(real):
        return real[:n].copy()
    rng = np.random.default_rng(seed)
    m = n - len(real)
    a, b = real[rng.integers(0, len(real), m)], real[rng.integers(0, len(real), m)]
    mix = a + rng.uniform(0.2, 0.8, (m, 1)).astype(np.float32) * b + 0.05 * rng.standard_normal(a.shape).astype(np.float32)
    mix /= np.linalg.norm(mix, axis=1, keepdims=True)
    return np.vstack([real, mix.astype(np.float32)])


def before_search(vectors: np.ndarray, qv: np.ndarray, k: int) -> np.ndarray:
    """The exact path as it was: one product on numpy's default BLAS threads, then argpartition + lexsort."""
    scores = vectors @ qv
    part = np.argpartition(-scores, k - 1)[:k]
    return part[np.lexsort((part, -scores[part]))]


def timed_pair(fns: dict, queries: list, warmup: int = 10) -> dict:
    """Wall and CPU seconds per query of each fn, alternating which goes first query by query."""
    names = list(fns)
    for q in queries[:warmup]:
        for n in names:
            fns[n](q)
    wall = {n: [] for n in names}
    cpu = {n: [] for n in names}
    for i, q in enumerate(queries):
        for n in (names if i % 2 == 0 else names[::-1]):
            c0, t0 = time.process_time(), time.perf_counter()
            fns[n](q)
            wall[n].append(time.perf_counter() - t0)
            cpu[n].append(time.process_time() - c0)
    return {n: {"wall_ms": latency_ms(wall[n]), "cpu_ms": latency_ms(cpu[n])} for n in names}


def run(quick: bool, sizes: list[int], cache_root: Path) -> tuple[list[Figure], dict]:
    registry = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)
    test = load_benchmark(registry["scifact"], "test")
    train = load_benchmark(registry["scifact"], "train")
    queries = [test.queries[q] for q in test.query_ids()][: 60 if quick else None]
    calib_queries = [train.queries[q] for q in train.query_ids()][: 100 if quick else 400]
    new_embedder = Embedder()                        # the default backend
    old_embedder = Embedder(backend="torch")         # what the index used before backends
    int8_embedder = Embedder(backend="onnx-int8")   # the fastest query embedding, whatever the default
    if quick:
        emb = pd.read_parquet(quick_base({"scifact": 300}) / "corpus_embeddings" / "scifact.parquet")
        real = np.stack(emb.sort_values("chunk_idx")["embedding"].to_numpy()).astype(np.float32)
    else:
        real = scifact_vectors(new_embedder, cache_root)
    qvs = new_embedder.encode_queries(queries)
    calib = new_embedder.encode_queries(calib_queries)
    details: dict = {"cache_root": str(cache_root), "queries": len(queries), "calibration_queries": len(calib_queries),
                     "k": 10, "backend_after": new_embedder.backend, "backend_before": "torch", "sizes": {}}
    figures = []
    for n in sizes:
        row: dict = {"load_average_start": load_average()}
        vectors = synthetic(real, n)
        chunks_frame = pd.DataFrame({"chunk_id": [f"c{i}" for i in range(n)], "title": "",
                                                       "kind": "x", "text": ""})
        t0 = time.perf_counter()
        index = CorpusIndex("synthetic", chunks_frame, {}, vectors, False, new_embedder,
                            AnnConfig(min_chunks=10**12))  # exact search at every size here
        scan = index.scan
        row["scan_build_s"] = round(time.perf_counter() - t0, 3)
        row["scan"] = scan is not None
        # same results, before vs after, on every query
        index.dense_top_k(qvs[:1], 10)  # warm
        mismatches = sum(not np.array_equal(before_search(vectors, qv, 10), index.dense_top_k(qv[None], 10)[0][0])
                         for qv in qvs)
        row["top10_mismatches_before_vs_after"] = int(mismatches)
        row["search_only"] = timed_pair({
            "before": lambda qv: before_search(vectors, qv, 10),
            "after": lambda qv: index.dense_top_k(qv[None], 10),
        }, list(qvs))
        if scan is not None:
            row["scan_candidates_per_query"] = round(scan.stats["candidates"] / max(scan.stats["queries"], 1), 1)
            row["scan_fallbacks"] = scan.stats["fallbacks"]

        old_index = CorpusIndex("synthetic", chunks_frame, {}, vectors, False, old_embedder,
                                AnnConfig(min_chunks=10**12))

        def old_dense_top_k(q: np.ndarray, k: int):
            qv = np.atleast_2d(q)[0]
            top = before_search(vectors, qv, k)
            return top[None], (vectors[top] @ qv)[None]

        old_index.dense_top_k = old_dense_top_k
        row["end_to_end"] = timed_pair({
            "before": lambda q: old_index.search(q, 10, "dense"),
            "after": lambda q: index.search(q, 10, "dense"),
        }, queries)
        row["query_embedding"] = timed_pair({
            "before": lambda q: old_embedder.encode_queries([q]),
            "after": lambda q: new_embedder.encode_queries([q]),
            "onnx-int8": lambda q: int8_embedder.encode_queries([q]),
        }, queries)

        truth = exact_top_k(vectors, qvs, 10)
        ann_rows = {}
        for name, calibration in (("pseudo_queries", None), ("real_train_queries", calib)):
            ann = AnnIndex.build(vectors, AnnConfig(min_chunks=0), calibration=calibration)
            pos, _ = ann.search(qvs, 10)
            lat = timed_pair({"ann": lambda qv: ann.search(qv[None], 10)}, list(qvs))["ann"]
            ann_rows[name] = {"nprobe": ann.nprobe, "nlist": ann.index.nlist,
                              "recall@10_test_queries": round(recall_at_k(pos, truth), 4),
                              "calibration_curve": ann.build_stats["calibration"]["recall_by_nprobe"],
                              "latency": lat}
        row["ann"] = ann_rows
        row["load_average_end"] = load_average()
        details["sizes"][str(n)] = row
        s, e = row["search_only"], row["end_to_end"]
        print(f"{n}: search p50 before {s['before']['wall_ms']['p50']} ms, after {s['after']['wall_ms']['p50']} ms; "
              f"end to end before {e['before']['wall_ms']['p50']} ms, after {e['after']['wall_ms']['p50']} ms; "
              f"ANN nprobe pseudo {ann_rows['pseudo_queries']['nprobe']} (recall "
              f"{ann_rows['pseudo_queries']['recall@10_test_queries']}), real {ann_rows['real_train_queries']['nprobe']}"
              f" (recall {ann_rows['real_train_queries']['recall@10_test_queries']}); load {row['load_average_end']}",
              flush=True)
        target = TARGET_P50_MS if n >= 100_000 else None
        note = (f"before {s['before']['wall_ms']['p50']} ms (CPU {s['before']['cpu_ms']['p50']}); after CPU "
                f"{s['after']['cpu_ms']['p50']} ms; same top 10 on {len(qvs) - mismatches}/{len(qvs)} queries; "
                f"load {row['load_average_start'][0]}-{row['load_average_end'][0]}")
        figures.append(Figure(f"exact dense search p50, {n:,} chunks, search only (after)", s["after"]["wall_ms"]["p50"],
                              "ms", target, "<=" if target else None, note))
        figures.append(Figure(f"dense search p50, {n:,} chunks, end to end with query embedding (after)",
                              e["after"]["wall_ms"]["p50"], "ms",
                              note=f"before {e['before']['wall_ms']['p50']} ms; query embedding alone "
                                   f"{row['query_embedding']['after']['wall_ms']['p50']} ms ({new_embedder.backend}) vs "
                                   f"{row['query_embedding']['before']['wall_ms']['p50']} ms (torch), "
                                   f"{row['query_embedding']['onnx-int8']['wall_ms']['p50']} ms (onnx-int8)"))
        real_ann = ann_rows["real_train_queries"]
        figures.append(Figure(f"ANN recall@10 on SciFact test queries, {n:,} chunks, nprobe calibrated on real "
                              f"train queries", real_ann["recall@10_test_queries"], "", 0.95, ">=",
                              f"nprobe {real_ann['nprobe']}/{real_ann['nlist']}; pseudo-query calibration: nprobe "
                              f"{ann_rows['pseudo_queries']['nprobe']}, recall "
                              f"{ann_rows['pseudo_queries']['recall@10_test_queries']}"))
        del index, old_index, vectors, scan
    return figures, details


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_options(ap)
    ap.add_argument("--sizes", help="comma-separated corpus sizes (default 10000,100000; --quick 5000)")
    ap.add_argument("--cache-root", type=Path, default=PARQUET / "cache" / "embeddings",
                    help="embedding cache to read SciFact's vectors from (read only)")
    args = ap.parse_args()
    started = machine()
    figures, details = run(args.quick, [int(s) for s in (args.sizes or ("5000" if args.quick else "10000,100000")).split(",")], args.cache_root)
    write_result("dense_latency", figures, details, started, args.quick, args.out)


if __name__ == "__main__":
    main()
