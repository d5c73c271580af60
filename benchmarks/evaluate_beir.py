"""Evaluate a named retriever on a BEIR folder and write the metrics as JSON.

    python benchmarks/evaluate_beir.py --folder ../shared/data/scifact --split test --retriever bm25
    python benchmarks/evaluate_beir.py --folder ../shared/data/scifact --split test --retriever hybrid --tune-split train
    python benchmarks/evaluate_beir.py --quick --out /tmp/bench   # the first 500 SciFact documents, BM25

Builds the index in memory with the project's own code (the same analyzer, BM25/TF-IDF and MiniLM as the assets);
dense vectors come from the project's embedding cache (data/parquet/cache/embeddings), so a corpus the Dagster
assets already embedded costs nothing to re-embed. `--quick` keeps the folder's first 500 documents (default
folder: the shared SciFact) and the queries judged on them, with a temporary embedding cache, and writes
`evaluate_<name>_<split>_<retriever>_quick.json`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import quick_tmp  # noqa: E402

from causal_assets.core.registry.benchmarks import Benchmark  # noqa: E402
from causal_assets.core.corpus.beir import load_beir_corpus, load_beir_qrels, load_beir_queries  # noqa: E402
from causal_assets.core.corpus.chunk import chunks_to_frame  # noqa: E402
from causal_assets.core.measures.metrics import evaluate  # noqa: E402
from causal_assets.core.evaluation.runner import run_benchmark  # noqa: E402
from causal_assets.core.index.build import build_index  # noqa: E402
from causal_assets.core.index.dense import DEFAULT_MODEL, EmbeddingCache  # noqa: E402
from causal_assets.core.registry.retrievers import RETRIEVERS  # noqa: E402
from causal_assets.core.retrievers.factory import build_retriever  # noqa: E402
from causal_assets.core.tuning.fusion import best_weight, sweep_fusion_weight  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

QUICK_DOCUMENTS = 500


def beir_benchmark(folder: Path, split: str, documents: set[str] | None = None) -> Benchmark:
    """The split's judged queries; with `documents`, only those judged on them, and only those judgements."""
    queries = load_beir_queries(folder)
    qrels = load_beir_qrels(folder, split, query_ids=set(queries))
    if documents is not None:
        qrels = {q: kept for q, rel in qrels.items() if (kept := {d: g for d, g in rel.items() if d in documents})}
    return Benchmark(folder.name, split, {q: queries[q] for q in qrels}, qrels)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"a smoke run: the first {QUICK_DOCUMENTS} documents")
    ap.add_argument("--folder", type=Path, help="a BEIR folder (required, but with --quick: the shared SciFact)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    ap.add_argument("--params", type=json.loads, default={}, help='retriever params as JSON, e.g. \'{"embedding": {"similarity_cutoff": null}}\'')
    ap.add_argument("--tag", default="", help="suffix of the output file name")
    ap.add_argument("--fusion-weight", type=float, help="hybrid: dense share (default: tuned on --tune-split)")
    ap.add_argument("--tune-split", help="hybrid: split to choose the fusion weight on (never the eval split)")
    ap.add_argument("--split-identifiers", action="store_true", help="code corpora: index identifier parts")
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "benchmarks")
    args = ap.parse_args()
    if args.folder is None:
        if not args.quick:
            ap.error("--folder is required")
        args.folder = Settings.from_env().shared_data / "scifact"
    if args.tune_split == args.split:
        ap.error("--tune-split must differ from --split")

    t0 = time.perf_counter()
    name = args.folder.name
    chunks = chunks_to_frame(load_beir_corpus(args.folder, name))
    documents = None
    if args.quick:
        chunks = chunks.head(QUICK_DOCUMENTS).reset_index(drop=True)
        documents = set(chunks["chunk_id"])   # a BEIR chunk is a document, under its id
    dense = args.retriever != "bm25" and args.retriever != "tfidf"
    cache_root = quick_tmp() if args.quick else ROOT / "data" / "parquet" / "cache"
    index = build_index(chunks, name, args.split_identifiers, dense=dense,
                        cache=EmbeddingCache(cache_root / "embeddings", DEFAULT_MODEL))
    build_s = time.perf_counter() - t0
    params, notes = dict(args.params), {}
    if args.retriever == "hybrid":
        if args.fusion_weight is not None:
            params["weight"] = args.fusion_weight
        elif args.tune_split:
            sweep = sweep_fusion_weight(index, beir_benchmark(args.folder, args.tune_split, documents))
            params["weight"] = best_weight(sweep)
            notes["tune_sweep"] = sweep[["weight", "value"]].to_dict(orient="records")
    bench = beir_benchmark(args.folder, args.split, documents)
    rr = run_benchmark(build_retriever(args.retriever, index, params), bench)
    metrics = evaluate(bench.qrels, rr.run, ks=(1, 3, 5, 10, 100))
    result = {
        "benchmark": name, "quick": args.quick, "split": args.split, "retriever": args.retriever, "params": params,
        "queries": len(bench.query_ids()), "documents": len(chunks), "index_build_s": round(build_s, 2),
        "retrieval_s": round(rr.seconds, 3),
        "metrics": {f"{m}@{k}" if k else m: round(v, 5) for m, k, v in metrics.itertuples(index=False)},
        **notes,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = (("_split_identifiers" if args.split_identifiers else "") + (f"_{args.tag}" if args.tag else "")
              + ("_quick" if args.quick else ""))
    path = args.out / f"evaluate_{name}_{args.split}_{args.retriever}{suffix}.json"
    path.write_text(json.dumps(result, indent=2))
    m = result["metrics"]
    print(f"{name}/{args.split} {args.retriever} {params}: nDCG@10 {m['ndcg@10']:.4f}  MRR@10 {m['mrr@10']:.4f}  "
          f"Recall@100 {m['recall@100']:.4f}  -> {path}")


if __name__ == "__main__":
    main()
