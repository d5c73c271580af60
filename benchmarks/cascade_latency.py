"""Latency of one cascade query (TF-IDF -> dense re-rank -> graph -> entropy loop) on the materialized SciFact
index, with query embeddings computed beforehand (so the timing excludes MiniLM).

    python benchmarks/cascade_latency.py                     # needs data/parquet/corpus_embeddings/scifact.parquet
    python benchmarks/cascade_latency.py --embeddings v.npy  # or vectors aligned with corpus_chunks (chunk_idx order)

Runs the SciFact test queries (qrels/test.tsv: 300), each once after a short warm-up, and writes p50/p95/mean/max
of `retrieve` wall time, per-stage medians, iteration counts, termination reasons and the retrieval quality of
`retrieve_many` (padded to depth 100) to data/benchmarks/cascade_latency.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from causal_assets.core.corpus.beir import load_beir_qrels, load_beir_queries  # noqa: E402
from causal_assets.core.evaluation.metrics import evaluate  # noqa: E402
from causal_assets.core.index.search import EMBEDDINGS, CorpusIndex  # noqa: E402
from causal_assets.core.retrievers.cascade import CascadeRetriever, RetrievalConfig  # noqa: E402
from causal_assets.core.storage import asset_path  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, default=ROOT / "data" / "parquet")
    ap.add_argument("--folder", type=Path, default=SETTINGS.shared_data / "scifact")
    ap.add_argument("--split", default="test")
    ap.add_argument("--config", type=Path, help="a saved RetrievalConfig (JSON/YAML); default: the defaults")
    ap.add_argument("--embeddings", type=Path, help=".npy chunk vectors when the embeddings asset is not materialized")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "benchmarks" / "cascade_latency.json")
    args = ap.parse_args()

    emb_asset = asset_path(args.base, EMBEDDINGS, "scifact")
    if args.embeddings is None and not Path(str(emb_asset)).exists():
        print(f"{emb_asset} not found: materialize the scifact index first (or pass --embeddings)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    if args.embeddings is None:
        index = CorpusIndex.load(args.base, "scifact")
        source = str(emb_asset)
    else:
        index = CorpusIndex.load(args.base, "scifact", dense=False)
        index.embeddings = np.load(args.embeddings).astype(np.float32)
        if index.embeddings.shape[0] != len(index.ids):
            raise SystemExit(f"{args.embeddings}: {index.embeddings.shape[0]} vectors for {len(index.ids)} chunks")
        source = str(args.embeddings)
    config = RetrievalConfig.load(args.config) if args.config else RetrievalConfig()
    retriever = CascadeRetriever(index, config)
    load_s = time.perf_counter() - t0

    queries = load_beir_queries(args.folder)
    qrels = load_beir_qrels(args.folder, args.split, query_ids=set(queries))
    qids = sorted(qrels, key=lambda q: int(q) if q.isdigit() else q)
    texts = [queries[q] for q in qids]
    t = time.perf_counter()
    vectors = index.embedder.encode_queries(texts)
    encode_s = time.perf_counter() - t

    for text, qv in list(zip(texts, vectors))[: args.warmup]:
        retriever.retrieve(text, query_vector=qv)
    wall, metas = [], []
    for text, qv in zip(texts, vectors):
        t = time.perf_counter()
        result = retriever.retrieve(text, query_vector=qv)
        wall.append(time.perf_counter() - t)
        metas.append(result.metadata)
    ms = np.asarray(wall) * 1000

    t = time.perf_counter()
    results = retriever.retrieve_many(texts, 100)
    many_s = time.perf_counter() - t
    run = {q: {h.chunk_id: float(101 - h.rank) for h in hits} for q, hits in zip(qids, results)}
    metrics = evaluate(qrels, run, ks=(1, 10, 100))

    def stage(key: str) -> float:
        return round(float(np.median([m[key] for m in metas])) * 1000, 3)

    report = {
        "benchmark": "scifact", "split": args.split, "queries": len(texts), "documents": len(index.ids),
        "embeddings": source, "config": config.model_dump(mode="json"),
        "latency_ms": {"p50": round(float(np.percentile(ms, 50)), 3), "p95": round(float(np.percentile(ms, 95)), 3),
                       "mean": round(float(ms.mean()), 3), "max": round(float(ms.max()), 3)},
        "stage_median_ms": {k: stage(k) for k in ("tfidf_time", "embedding_time", "graph_time", "entropy_time",
                                                  "total_time")},
        "iterations": dict(sorted(Counter(m["iterations"] for m in metas).items())),
        "termination_reasons": dict(Counter(m["termination_reason"] for m in metas).most_common()),
        "documents_returned": {"median": float(np.median([m["n_embedding_documents"] + m["n_graph_documents"]
                                                          for m in metas]))},
        "metrics_retrieve_many_depth100": {f"{r.metric}@{r.k}": round(r.value, 5)
                                           for r in metrics.itertuples() if r.k in (1, 10, 100)},
        "query_encoding_s": round(encode_s, 3), "retrieve_many_s": round(many_s, 3), "index_load_s": round(load_s, 3),
        "note": "latency excludes query embedding (vectors precomputed); nothing is cached across queries",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("latency_ms", "stage_median_ms", "iterations", "termination_reasons",
                                             "metrics_retrieve_many_depth100")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
