"""The retrieval quality targets, read from what the normal assets produced (tuned_retriever_configs and
evaluation_metrics / evaluation_runs), on questions nothing was tuned on.

    python benchmarks/retrieval_targets.py [--base data/parquet] [--reports data/reports]

For every benchmark: the retriever selected on the tune split (reranked by `cross_encoder_tuned` where
`tuned_reranker` was adopted) and its held-out figures with 95% bootstrap intervals, beside the other retrievers'
test figures for transparency; the verdict reads only the train-selected one (choosing on test would be tuning on
test). `all_gold@2` is computed from evaluation_runs. Writes data/benchmarks/retrieval_targets.json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT_DIR, PARQUET, ROOT, machine  # noqa: E402

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.measures.metrics import evaluate_per_query  # noqa: E402
from causal_assets.core.measures.significance import bootstrap_ci  # noqa: E402
from causal_assets.core.foundation.storage import asset_path, read_parquet  # noqa: E402
from causal_assets.core.stored.tuned import load_tuned  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

# benchmark -> [(metric, k, target)] on the held-out split
TARGETS = {
    "scifact": [("ndcg", 10, 0.77)],
    "hotpotqa": [("precision", 2, 0.90), ("all_gold", 2, 0.80)],
    "musique": [("precision", 2, 0.80), ("recall", 5, 0.90)],
    "2wiki": [("precision", 2, 0.95)],
    "cosqa": [("mrr", 10, 0.60)],
}
SHOWN = [("precision", 2), ("recall", 5), ("all_gold", 2), ("ndcg", 10), ("mrr", 10), ("map", 10)]


def all_gold_hits(runs, qrels, k: int) -> np.ndarray:
    """Per judged query of one retriever's runs: 1 when its top k holds every relevant document."""
    top = runs[runs["rank"] <= k].groupby("query_id")["chunk_id"].apply(set).to_dict()
    return np.array([float(set(qrels[q]) <= top.get(q, set())) for q in sorted(qrels) if qrels[q]])


def all_gold_at(runs, qrels, k: int) -> dict[str, float]:
    """Per retriever: share of queries whose top k holds every relevant document."""
    out = {}
    for retriever, g in runs.groupby("retriever"):
        hits = all_gold_hits(g, qrels, k)
        out[retriever] = float(hits.mean()) if len(hits) else float("nan")
    return out


def interval(runs, qrels, metric: str, k: int) -> dict[str, float]:
    """The held-out figure's 95% bootstrap interval over the questions (the evaluation report's resampling,
    `core.evaluation.significance`), from one retriever's stored runs: how far the figure could move on another
    sample of the same size. `mean` is recomputed from the runs as a check against evaluation_metrics."""
    if metric == "all_gold":
        values = all_gold_hits(runs, qrels, k)
    else:
        run = {q: dict(zip(g["chunk_id"].astype(str), g["score"].astype(float))) for q, g in runs.groupby("query_id")}
        per_query = evaluate_per_query(qrels, run, ks=(k,), map_k=k)
        # in query order: the resampling is seeded, so the interval is the same in every process
        values = per_query[(per_query["metric"] == metric) & (per_query["k"] == k)].sort_values("query_id")["value"]
        values = values.to_numpy()
    lo, hi = bootstrap_ci(values)
    return {"mean": round(float(values.mean()), 4), "ci95": [round(lo, 4), round(hi, 4)], "queries": len(values)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, default=PARQUET)
    ap.add_argument("--reports", type=Path, default=ROOT / "data" / "reports")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    args = ap.parse_args()
    specs = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)
    result = {"machine_start": machine(), "benchmarks": {}}
    for name, targets in TARGETS.items():
        spec = specs[name]
        path = asset_path(args.base, "evaluation_metrics", name)
        if not path.exists():
            result["benchmarks"][name] = {"error": "evaluation_metrics not materialized"}
            continue
        metrics = read_parquet(path)
        metrics = metrics[(metrics["truth"] == "qrels")]
        held = "test" if "test" in spec.eval_splits else spec.eval_splits[0]
        test = metrics[metrics["split"] == held]
        runs = read_parquet(asset_path(args.base, "evaluation_runs", name))
        bench = load_benchmark(spec, held)
        gold2 = all_gold_at(runs[runs["split"] == held], bench.qrels, 2)
        table = {}
        for retriever, g in test.groupby("retriever"):
            row = {f"{m}@{k}": round(float(g[(g.metric == m) & (g.k == k)]["value"].iloc[0]), 4)
                   for m, k in SHOWN if m != "all_gold" and len(g[(g.metric == m) & (g.k == k)])}
            row["all_gold@2"] = round(gold2.get(retriever, float("nan")), 4)
            table[retriever] = row
        # The version the tuned_retriever_configs materialization recorded (its config_version column).
        trials_path = asset_path(args.base, "tuned_retriever_configs", name)
        versions = read_parquet(trials_path)["config_version"].dropna().unique() if trials_path.exists() else []
        tuned = load_tuned(args.reports / "tuned", name, str(versions[0])) if len(versions) else None
        selected = f"{tuned.selected}_tuned" if tuned is not None and tuned.selected else None
        # The product's final ranking: the selected retriever reranked by the cross-encoder, where tuned_reranker
        # adopted one on held-out train queries (the evaluation's `cross_encoder_tuned`); both are train decisions.
        reranked = "cross_encoder_tuned" in table and selected is not None
        selected = "cross_encoder_tuned" if reranked else selected
        verdict = []
        for m, k, target in targets:
            value = table.get(selected, {}).get(f"{m}@{k}")
            spread = interval(runs[(runs["split"] == held) & (runs["retriever"] == selected)], bench.qrels, m, k) \
                if selected in table else None
            verdict.append({"metric": f"{m}@{k}", "target": target, "retriever": selected, "value": value,
                            "met": value is not None and value >= target, "interval": spread,
                            "best_on_test_for_reference": max(((r, v.get(f"{m}@{k}", float("nan")))
                                                               for r, v in table.items()), key=lambda t: t[1])})
        result["benchmarks"][name] = {
            "held_out_split": held, "held_out_queries": len(bench.query_ids()),
            "tune_split": tuned.content["tune_split"] if tuned else None,
            "tuned_config": tuned.version if tuned else None,
            "selected_on_tune_split": selected,
            "reranked_by_cross_encoder": reranked,
            "tuning_figures": {n: {"value": round(b["value"], 4), "evaluation": b["evaluation"],
                                   "metric": tuned.content["metric"],
                                   # what the selection compared (configs from before it: absent)
                                   **({"selection_value": round(b["selection_value"], 4),
                                       "selection_evaluation": b["selection_evaluation"]}
                                      if "selection_value" in b else {})}
                               for n, b in tuned.retrievers.items()}
            if tuned else {},
            "learned_evaluated": "learned_tuned" in table,
            "targets": verdict, "test_table": table}
        print(f"{name} ({held}, {len(bench.query_ids())} q): selected on {result['benchmarks'][name]['tune_split']}: "
              f"{selected}; " + "; ".join(f"{v['metric']} {v['value']} (95% {v['interval'] and v['interval']['ci95']}; "
                                          f"target {v['target']}, {'met' if v['met'] else 'NOT met'})"
                                          for v in verdict), flush=True)
    result["machine_end"] = machine()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "retrieval_targets.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
