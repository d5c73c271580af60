"""Scaling curve: index and query cost at 1k, 10k, 100k and 1M chunks of a synthetic corpus, and the 1M-chunk
dense/hybrid latency with the ANN index (recall@10 against exact search, memory).

    python benchmarks/scaling.py [--quick] [--sizes 1000,10000,100000,1000000] [--queries 100] [--out DIR]

The corpus is `synthetic_corpus.make_corpus` (recombined real chunks and vectors, nothing re-encoded), so it needs a
materialized corpus index. Per size, in one process, sizes ascending: the index cost (analysis, BM25, TF-IDF, the
ANN build, the postings written as Parquet up to `--write-max`; embedding estimated from the measured throughput,
marked as such), p50/p95 query latency of every retriever as the product runs it (exact or ANN dense by size), ANN
recall@10, and memory. The log-log slope between sizes tells what grows super-linearly. `--quick`: 1k and 5k
chunks made of the first 300 SciFact and 300 HotpotQA chunks, indexed in a temporary directory. Writes
data/benchmarks/scaling[_quick].json and .png.
"""
from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from common import (OUT_DIR, PARQUET, Figure, add_common_options, current_rss_mib, latency_ms, load_average, machine,
                    quick_base, time_queries, write_result)
from synthetic_corpus import SourceChunks, SourceTerms, make_corpus, make_terms

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.index.ann import AnnConfig, AnnIndex, exact_top_k, recall_at_k
from causal_assets.core.index.build import sparse_frames, tokenize_chunks
from causal_assets.core.index.sparse import build_bm25, build_tfidf
from causal_assets.core.index.dense import Embedder
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.factory import build_retriever
from causal_assets.core.foundation.storage import write_parquet_atomic
from causal_assets.settings import Settings

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

TARGET_P50_MS_1M = 50.0
TARGET_RECALL = 0.95
CASCADE_MAX = 100_000
SUPERLINEAR = 1.1


class Stage:
    """Wall and CPU seconds of a block, into row["index"][name] and row["index_cpu"][name]."""

    def __init__(self, row: dict, name: str):
        self.row, self.name = row, name

    def __enter__(self):
        self.c0, self.t0 = time.process_time(), time.perf_counter()

    def __exit__(self, *exc):
        self.row["index"][self.name] = time.perf_counter() - self.t0
        self.row["index_cpu"][self.name] = time.process_time() - self.c0


def sparse_bytes(index) -> int:
    m = index.matrix
    return int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes)


def embedding_rate() -> float | None:
    """Index-stage embedding throughput (texts/s) measured by embedding_throughput.py, if it has run."""
    for name in ("embedding_throughput.json", "embedding_throughput_quick.json"):
        path = OUT_DIR / name
        if path.exists():
            return json.loads(path.read_text())["details"]["median_texts_per_second"]["index_stage"]
    return None


def measure_size(source: SourceChunks, n: int, queries: list[str], embedder: Embedder, warmup: int,
                 write_max: int, analyze_max: int, source_terms, previous: dict | None) -> dict:
    row: dict = {"n": n, "load_average_start": load_average(), "index": {}, "index_cpu": {}, "index_estimated": {}}
    t0 = time.perf_counter()
    chunks, vectors, plan = make_corpus(source, n, with_plan=True)
    row["synthesis_s"] = time.perf_counter() - t0  # making the data, not index cost

    t0 = time.perf_counter()
    if n <= analyze_max:
        with Stage(row, "analyze_s"):
            tokens = tokenize_chunks(chunks, False)  # the product's analyzer over every chunk
    else:
        # The same terms, exactly (see SourceTerms), from the source chunks' analysis: analysing is linear in the
        # text, so its cost at this size is the largest measured size's, scaled.
        tokens = make_terms(source_terms, plan)
        row["terms_from_sources_s"] = time.perf_counter() - t0
        if previous:
            row["index_estimated"]["analyze_s"] = previous["index"]["analyze_s"] * n / previous["n"]
    with Stage(row, "bm25_build_s"):
        sparse = {"bm25": build_bm25(tokens)}
    if n <= analyze_max:
        with Stage(row, "tfidf_build_s"):
            sparse["tfidf"] = build_tfidf(tokens)
    elif previous:
        row["index_estimated"]["tfidf_build_s"] = previous["index"]["tfidf_build_s"] * n / previous["n"]
    row["avg_terms_per_chunk"] = float(np.mean([len(t) for t in tokens]))
    del tokens
    gc.collect()
    row["vocabulary"] = len(sparse["bm25"].vocab)
    row["postings"] = {m: int(idx.matrix.nnz) for m, idx in sparse.items()}
    if n <= write_max:
        with Stage(row, "postings_write_s"):
            postings, vocab = sparse_frames(sparse, "synthetic", "synthetic")
            with tempfile.TemporaryDirectory() as tmp:
                write_parquet_atomic(postings, Path(tmp) / "sparse_postings.parquet")
                write_parquet_atomic(vocab, Path(tmp) / "sparse_vocabulary.parquet")
        del postings, vocab
    rate = embedding_rate()
    if rate:
        row["index_estimated"]["embedding_s"] = n / rate

    index = CorpusIndex("synthetic", chunks, sparse, vectors, False, embedder)  # product ANN threshold
    with Stage(row, "ann_build_s"):
        row["ann_in_product"] = index.ann is not None  # builds it when the corpus is large enough
        ann = index._ann
        if ann is None and n >= 10_000:
            ann = AnnIndex.build(vectors, AnnConfig(min_chunks=0))  # for the curve only: the cost below the threshold
    if ann is None:
        del row["index"]["ann_build_s"], row["index_cpu"]["ann_build_s"]
    else:
        row["ann"] = {k: v for k, v in ann.build_stats.items() if k != "calibration"} | {
            "nprobe": ann.nprobe, "calibration": ann.build_stats.get("calibration"), "memory": ann.memory_bytes()}
    row["memory_mib"] = {"vectors": round(vectors.nbytes / 2**20, 1),
                         "sparse": round(sum(sparse_bytes(s) for s in sparse.values()) / 2**20, 1),
                         "ann": round(sum(ann.memory_bytes().values()) / 2**20, 1) if ann is not None else 0.0,
                         "process_rss": current_rss_mib()}

    lat: dict = {}
    cpu: dict = {}

    def timed(name: str, fn) -> None:
        lat[name], cpu[name] = map(latency_ms, time_queries(fn, queries, warmup))

    timed("bm25", lambda q: index.search_many([q], 10, "bm25"))
    timed("dense", lambda q: index.search_many([q], 10, "dense"))
    hybrid = build_retriever("hybrid", index, {"weight": 0.7})
    timed("hybrid", lambda q: hybrid.retrieve_many([q], 10))
    if n <= CASCADE_MAX and "tfidf" in sparse:
        cascade = build_retriever("cascade", index)
        timed("cascade", lambda q: cascade.retrieve_many([q], 10))

    def exact(q: str):
        qv = embedder.encode_queries([q])
        return exact_top_k(vectors, qv, 10)

    timed("dense_exact", exact)
    qvs = embedder.encode_queries(queries)
    truth = exact_top_k(vectors, qvs, 10)
    if ann is not None:
        timed("dense_ann", lambda q: ann.search(embedder.encode_queries([q]), 10))
        row["ann_recall_at_10"] = recall_at_k(ann.search(qvs, 10)[0], truth)
    if index._ann is not None:  # the product path (ANN + hybrid shortlists) vs exact search
        found = np.array([[index.position[h.chunk_id] for h in hits] for hits in index.search_many(queries, 10, "dense")])
        row["dense_recall_at_10"] = recall_at_k(found, truth)
    # the query embedding alone, for reading the lines above
    timed("query_embedding", lambda q: embedder.encode_queries([q]))
    row["latency_ms"] = lat
    row["cpu_ms"] = cpu
    row["memory_mib"]["process_rss_after_queries"] = current_rss_mib()
    row["load_average_end"] = load_average()
    del index, hybrid, chunks, vectors, sparse, ann
    gc.collect()
    return row


def slopes(rows: list[dict], series: dict[str, callable]) -> dict:
    """Log-log slope of each series between successive sizes, and over the whole range (least squares)."""
    out = {}
    for name, get in series.items():
        pts = [(r["n"], get(r)) for r in rows]
        pts = [(n, v) for n, v in pts if v is not None and v > 0]
        if len(pts) < 2:
            continue
        x, y = np.log10([p[0] for p in pts]), np.log10([p[1] for p in pts])
        steps = {f"{pts[i][0]}->{pts[i + 1][0]}": round(float((y[i + 1] - y[i]) / (x[i + 1] - x[i])), 3)
                 for i in range(len(pts) - 1)}
        overall = float(np.polyfit(x, y, 1)[0])
        last = list(steps.values())[-1]
        out[name] = {"by_step": steps, "overall": round(overall, 3), "last_step": last,
                     "superlinear": bool(last > SUPERLINEAR)}
    return out


def plot(rows: list[dict], series: dict[str, callable], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, kind in zip(axes, ("index", "query")):
        for name, get in series.items():
            if not name.startswith(kind):
                continue
            pts = [(r["n"], get(r)) for r in rows if get(r)]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=name.split(":", 1)[1])
        ns = [r["n"] for r in rows]
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(ns)
        ax.set_xticklabels([f"{n:,}" for n in ns])
        ax.set_xlabel("chunks")
        ax.set_ylabel("seconds" if kind == "index" else "p50 ms per query (query embedding included)")
        ax.set_title("index build" if kind == "index" else "query latency")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


SERIES = {
    "index:analyze": lambda r: r["index"].get("analyze_s"),
    "index:bm25 build": lambda r: r["index"]["bm25_build_s"],
    "index:tfidf build": lambda r: r["index"].get("tfidf_build_s"),
    "index:ann build": lambda r: r["index"].get("ann_build_s"),
    "index:postings write": lambda r: r["index"].get("postings_write_s"),
    "index:embedding (estimated from measured throughput)": lambda r: r["index_estimated"].get("embedding_s"),
    "query:bm25": lambda r: r["latency_ms"]["bm25"]["p50"],
    "query:dense (product)": lambda r: r["latency_ms"]["dense"]["p50"],
    "query:dense exact": lambda r: r["latency_ms"]["dense_exact"]["p50"],
    "query:dense ann": lambda r: r["latency_ms"].get("dense_ann", {}).get("p50"),
    "query:hybrid": lambda r: r["latency_ms"]["hybrid"]["p50"],
    "query:cascade": lambda r: r["latency_ms"].get("cascade", {}).get("p50"),
}


def run(quick: bool, sizes: list[int] | None, n_queries: int, write_max: int,
        analyze_max: int, out: Path = OUT_DIR) -> tuple[list[Figure], dict]:
    sizes = sizes or ([1_000, 5_000] if quick else [1_000, 10_000, 100_000, 1_000_000])
    registry = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)
    scifact = load_benchmark(registry["scifact"], "test")
    queries = [scifact.queries[q] for q in scifact.query_ids()][:n_queries]
    t0 = time.perf_counter()
    source = SourceChunks(quick_base({"scifact": 300, "hotpotqa": 300}) if quick else PARQUET)
    source_s = time.perf_counter() - t0
    embedder = Embedder()
    embedder.encode_queries(["warm-up"])
    source_terms = SourceTerms(source) if max(sizes) > analyze_max else None
    rows = []
    for n in sizes:
        print(f"size {n:,} ...", flush=True)
        rows.append(measure_size(source, n, queries, embedder, min(10, len(queries)), write_max, analyze_max,
                                 source_terms, rows[-1] if rows else None))
        print(json.dumps({k: rows[-1][k] for k in ("n", "index", "memory_mib")}, default=float), flush=True)
    fits = slopes(rows, SERIES)
    out.mkdir(parents=True, exist_ok=True)
    plot(rows, SERIES, out / f"scaling{'_quick' if quick else ''}.png")
    details = {"sizes": sizes, "queries": len(queries), "source_chunks": len(source), "source_corpora": source.corpora,
               "source_load_s": source_s, "rows": rows, "loglog_slopes": fits,
               "superlinear": sorted(k for k, v in fits.items() if v["superlinear"]),
               "plot": str(out / f"scaling{'_quick' if quick else ''}.png")}
    figures = []
    top = rows[-1]
    label = f"{top['n']:,} chunks"
    lat = top["latency_ms"]
    for name in ("dense", "hybrid"):
        figures.append(Figure(f"{name} p50 latency at {label} (query embedding included)", lat[name]["p50"], "ms",
                              TARGET_P50_MS_1M if top["n"] >= 1_000_000 else None,
                              "<=" if top["n"] >= 1_000_000 else None,
                              f"p95 {lat[name]['p95']} ms; CPU p50 {top['cpu_ms'][name]['p50']} ms; "
                              f"ANN {'on' if top['ann_in_product'] else 'off'}"
                              f"{', nprobe ' + str(top['ann']['nprobe']) if top.get('ann') else ''}; "
                              f"exact scan p50 {lat['dense_exact']['p50']} ms; query embedding p50 "
                              f"{lat['query_embedding']['p50']} ms"))
    if "dense_recall_at_10" in top or "ann_recall_at_10" in top:
        rec = top.get("dense_recall_at_10", top.get("ann_recall_at_10"))
        figures.append(Figure(f"dense recall@10 of the ANN index vs exact search at {label}", round(rec, 4), "",
                              TARGET_RECALL, ">=", f"{len(queries)} SciFact test queries"))
    mem = top["memory_mib"]
    figures.append(Figure(f"memory at {label}: vectors + sparse + ANN", round(mem["vectors"] + mem["sparse"] + mem["ann"], 1),
                          "MiB", note=f"vectors {mem['vectors']}, sparse {mem['sparse']}, ANN codes {mem['ann']} MiB; "
                                      f"process RSS {mem['process_rss_after_queries']} MiB"))
    figures.append(Figure("series growing super-linearly (log-log slope > 1.1 on the last step)",
                          float(len(details["superlinear"])), "series",
                          note=", ".join(f"{k} ({fits[k]['last_step']})" for k in details["superlinear"]) or "none"))
    return figures, details


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_options(ap)
    ap.add_argument("--sizes", help="comma-separated corpus sizes (default 1k,10k,100k,1M; --quick 1k,5k)")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--write-max", type=int, default=100_000,
                    help="largest size whose postings are also written as Parquet (the pandas frame is large)")
    ap.add_argument("--analyze-max", type=int, default=100_000,
                    help="largest size whose texts are analysed and TF-IDF-indexed; above it the terms come from the "
                         "source chunks' analysis (identical) and both costs are scaled from the largest measured size")
    args = ap.parse_args()
    started = machine()
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    figures, details = run(args.quick, sizes, args.queries, args.write_max, args.analyze_max, args.out)
    write_result("scaling", figures, details, started, args.quick, args.out)


if __name__ == "__main__":
    main()
