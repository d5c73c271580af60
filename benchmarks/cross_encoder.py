"""The cross-encoder reranker over every tuned retriever, at every mixing weight, on SciFact's held-out split: what
`tuned_reranker` chose, beside what it did not.

    python benchmarks/cross_encoder.py [--benchmark scifact] [--base data/parquet] [--model DIR]

The product fits and adopts the cross-encoder in `tuned_reranker` (`core/tuning/reranker.py`) and reranks the
*selected* retriever with it. This script reads that model (or `--model DIR`) and reranks the top `depth` of every
`*_tuned` run in `evaluation_runs` by `z(run) + a * z(cross-encoder)` for each `a` in MIX, with the paired gain of
the adopted `a` over `a = 0` and its standard error. Choosing from this table would be tuning on test: it records
what the train-only choice left on the table. Writes data/benchmarks/cross_encoder_<benchmark>.json; ~0.3 s per
query and retriever on 2 cores.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PARQUET, machine, write_json  # noqa: E402

from causal_assets.core.benchmarks import load_benchmark, load_benchmark_registry  # noqa: E402
from causal_assets.core.evaluation.metrics import named_metric_per_query  # noqa: E402
from causal_assets.core.index.dense import resolve_model_reference  # noqa: E402
from causal_assets.core.index.search import CorpusIndex  # noqa: E402
from causal_assets.core.retrievers.cross_encoder import load_cross_encoder  # noqa: E402
from causal_assets.core.retrievers.similarity import zscore  # noqa: E402
from causal_assets.core.storage import asset_path, read_parquet  # noqa: E402
from causal_assets.core.tuning.encoder import paired_gain  # noqa: E402
from causal_assets.core.tuning.spec import TuningSpec  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

MIX = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


def per_query(qrels, run, qids, metric) -> list[float]:
    """`metric` per query of `qids` over one run (one metric call for the whole run); unranked queries score 0."""
    scores = named_metric_per_query(qrels, run, metric)
    return [scores.get(q, 0.0) for q in qids]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="scifact")
    ap.add_argument("--base", type=Path, default=PARQUET)
    ap.add_argument("--model", type=Path, help="a fitted cross-encoder directory (default: tuned_reranker's)")
    ap.add_argument("--split", default="test")
    args = ap.parse_args()
    started = machine()
    settings = Settings.from_env()
    spec = load_benchmark_registry(settings.benchmarks, settings.shared_data, settings.corpora)[args.benchmark]
    tuning = TuningSpec.model_validate(spec.tuning)
    record_path = asset_path(args.base, "tuned_reranker", args.benchmark)
    record = read_parquet(record_path).iloc[0] if record_path.exists() else None
    if args.model is None and (record is None or not record["adopted"]):
        sys.exit(f"{args.benchmark}: no adopted tuned_reranker under {args.base} (materialize it, or give --model)")
    model_path = str(args.model) if args.model else resolve_model_reference(str(record["model"]), record_path)
    adopted_weight = float(record["weight"]) if record is not None and record["adopted"] else 0.5
    depth = int(record["depth"]) if record is not None and record["depth"] == record["depth"] else 20
    max_length = int(record["max_length"]) if record is not None and record["max_length"] == record["max_length"] \
        else 160
    model = load_cross_encoder(model_path, max_length)   # one model or the ensemble of its members
    index = CorpusIndex.load(args.base, spec.corpus)   # only the chunks' texts are read
    bench = load_benchmark(spec, args.split)
    qids = [q for q in bench.query_ids() if any(v > 0 for v in bench.qrels.get(q, {}).values())]
    runs = read_parquet(asset_path(args.base, "evaluation_runs", args.benchmark))
    # every tuned run but the one that is already reranked by it
    runs = runs[(runs["split"] == args.split) & runs["retriever"].str.endswith("_tuned")
                & (runs["retriever"] != "cross_encoder_tuned")]
    out, t0 = {}, time.perf_counter()
    for name, r in runs.groupby("retriever"):
        base = {q: g.sort_values("rank") for q, g in r.groupby("query_id")}
        reranked: dict[float, dict[str, dict[str, float]]] = {a: {} for a in MIX}
        for q in qids:
            g = base.get(q)
            if g is None or not len(g):
                continue   # a query the run did not rank: it scores 0 at every `a`
            top = g["doc_id"].astype(str).tolist()[:depth]
            prior = zscore(g["score"].to_numpy(np.float64)[:depth])
            ce = zscore(model.score(bench.queries[q], index, top))
            for a in MIX:
                reranked[a][q] = {d: float(s) for d, s in zip(top, prior + a * ce)}
        qrels = {q: bench.qrels[q] for q in qids}
        per_a = {a: {q: float(v) for q, v in zip(qids, per_query(qrels, reranked[a], qids, tuning.metric))}
                 for a in MIX}
        gain, se = paired_gain({0.0: per_a[0.0]}, {adopted_weight: per_a[adopted_weight]})
        out[name] = {**{str(a): round(float(np.mean(list(v.values()))), 4) for a, v in per_a.items()},
                     "paired_gain": {"a": adopted_weight, "gain": round(gain, 4), "se": round(se, 4)}}
        print(name, out[name], flush=True)
    record_out = {"topic": "cross_encoder", "benchmark": args.benchmark, "split": args.split, "metric": tuning.metric,
                  "queries": len(qids), "model": model_path, "adopted_weight": adopted_weight, "depth": depth,
                  "note": f"{tuning.metric} of each run's top {depth} reranked (deeper hits dropped; the metric is "
                          f"@10)", "score_seconds": round(time.perf_counter() - t0, 1),
                  "machine_start": started, "machine_end": machine(), "by_retriever": out}
    print(f"wrote {write_json(f'cross_encoder_{args.benchmark}', record_out)}")


if __name__ == "__main__":
    main()
