"""Answer utility on a benchmark's held-out split, from its materialized evaluation: the mean answer gain (nats) with a
95% bootstrap interval over questions, per retriever and k, for the named retrievers, the retriever the tuning
selected on train, and the references (@gold, @labels, @random); then which retriever each truth selected on train
(the tuned configuration's `truths`) and the paired test of the answer gain's choice against the judgements'.

    python benchmarks/answer_utility.py --base data/parquet --reports data/reports --benchmark hotpotqa --split test \
        --retrievers bm25 dense hybrid entity_first learned_tuned

Reads `evaluation_answers`, `evaluation_metrics` and `tuned_retriever_configs` of the benchmark (materialize them
first: docs/results.md); writes data/benchmarks/answer_utility_<benchmark>.json.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT_DIR, PARQUET, ROOT, machine, write_json  # noqa: E402

from causal_assets.core.foundation.storage import asset_path, read_parquet  # noqa: E402
from causal_assets.core.evaluation.answers import paired_gain  # noqa: E402
from causal_assets.core.measures.significance import bootstrap_ci  # noqa: E402
from causal_assets.core.stored.tuned import load_tuned  # noqa: E402


def gains(answers, retriever: str, k: int) -> dict:
    values = answers[(answers["retriever"] == retriever) & (answers["k"] == k)].sort_values("query_id")
    v = values["answer_gain"].to_numpy()
    if not len(v):
        return {"questions": 0}
    lo, hi = bootstrap_ci(v)
    return {"mean": round(float(v.mean()), 3), "ci95": [round(lo, 3), round(hi, 3)], "questions": len(v)}


def paired(answers, a: str, b: str, k: int) -> dict:
    """`a` against `b` on answer gain at k, on the questions both have."""
    d = paired_gain(answers, a, b, k)
    if d is None:
        return {"questions": 0}
    return {"delta": round(d["delta"], 3), "ci95": [round(d["low"], 3), round(d["high"], 3)],
            "p": round(d["p"], 4), "questions": d["questions"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, default=PARQUET)
    ap.add_argument("--reports", type=Path, default=ROOT / "data" / "reports")
    ap.add_argument("--benchmark", default="hotpotqa")
    ap.add_argument("--split", default="test")
    ap.add_argument("--retrievers", nargs="+", default=["bm25", "dense", "hybrid", "entity_first", "learned_tuned"])
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    args = ap.parse_args()
    answers = read_parquet(asset_path(args.base, "evaluation_answers", args.benchmark))
    answers = answers[answers["split"] == args.split]
    if not len(answers):
        raise SystemExit(f"no evaluation_answers rows of {args.benchmark}/{args.split}: materialize the evaluation "
                         f"with `answers:` on")
    metrics = read_parquet(asset_path(args.base, "evaluation_metrics", args.benchmark))
    metrics = metrics[metrics["split"] == args.split]
    versions = read_parquet(asset_path(args.base, "tuned_retriever_configs", args.benchmark))["config_version"]
    tuned = load_tuned(args.reports / "tuned", args.benchmark, str(versions.dropna().iloc[0]))
    truths = tuned.content.get("truths") or {}
    selected = f"{tuned.selected}_tuned" if tuned.selected else None
    shown = list(dict.fromkeys([*args.retrievers, *([selected] if selected else []), "@gold", "@labels", "@random"]))
    ks = sorted(int(k) for k in answers["k"].unique())
    table = {r: {f"k={k}": gains(answers, r, k) for k in ks} for r in shown}
    metric, k_metric = tuned.content["metric"].split("@")
    chosen = {t: f"{n}_tuned" for t, n in (truths.get("selected_by") or {}).items() if n}
    by_truth = {}
    for truth, name in chosen.items():
        row = {"retriever": name, "tune_split_figure": round(truths["figures"][name[:-6]][truth], 4)}
        for t in ("qrels", "mc_labels"):
            hit = metrics[(metrics.truth == t) & (metrics.retriever == name) & (metrics.metric == metric)
                          & (metrics.k == int(k_metric))]["value"]
            row[f"{t} {tuned.content['metric']}"] = round(float(hit.iloc[0]), 4) if len(hit) else None
        row.update({f"answer gain k={k}": gains(answers, name, k) for k in ks})
        by_truth[truth] = row
    comparison = {f"k={k}": paired(answers, chosen["answers"], chosen["qrels"], k) for k in ks} \
        if {"answers", "qrels"} <= set(chosen) and chosen["answers"] != chosen["qrels"] else \
        ("the answer gain and the judgements selected the same retriever" if {"answers", "qrels"} <= set(chosen)
         else "the answer gain did not select (not measured on the tune split)")
    result = {"machine_start": machine(), "benchmark": args.benchmark, "split": args.split,
              "questions": int(answers["query_id"].nunique()), "tuned_config": tuned.version,
              "selected_on_tune_split": selected, "gain_by_retriever": table, "selected_by_truth": by_truth,
              "answers_vs_qrels_choice": comparison, "machine_end": machine()}
    path = write_json(f"answer_utility_{args.benchmark}", result, args.out)
    for r, row in table.items():
        print(f"{r:>16}: " + "; ".join(f"{k} {v.get('mean', float('nan')):+.3f} {v.get('ci95')} (n {v['questions']})"
                                        for k, v in row.items()), flush=True)
    for truth, row in by_truth.items():
        print(f"selected by {truth}: {row['retriever']} " + ", ".join(f"{k} {v}" for k, v in row.items()
                                                                     if k != "retriever"), flush=True)
    print(f"answers' choice vs qrels' choice: {comparison}", flush=True)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
