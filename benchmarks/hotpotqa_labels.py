"""Monte Carlo relevance labels on HotpotQA (local blind solver) against the gold supporting paragraphs.

    .venv/bin/python benchmarks/hotpotqa_labels.py [--base data/parquet] [--out data/benchmarks/hotpotqa_labels.json]

Reads what the assets wrote for the `hotpotqa` partition (`mc_labels` with every estimator's rows,
`candidate_pools`, `mc_trials`, `solver_calls`) and the gold from the shared data; a candidate is gold iff its
paragraph title is among the question's `supporting_facts`. Reported per estimator: precision, recall and F1 of the
YES set (micro over pairs and macro per question) and the label counts, beside the answer-containment baseline (on
the full paragraph and on the text the solver saw); also base and overall success rates, calls and solver seconds
per question, and call-cache hits.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from causal_assets.core.labeling.validators import _contains  # noqa: E402
from causal_assets.core.text.answers import normalize_answer  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

PARTITION = "hotpotqa"


def read_asset(base: Path, asset: str) -> pd.DataFrame:
    path = base / asset / f"{PARTITION}.parquet"
    if not path.exists():
        raise SystemExit(f"{path} does not exist: materialize candidate_pools, mc_trials, solver_calls and "
                         f"mc_labels for the {PARTITION!r} partition first")
    return pd.read_parquet(path)


def load_gold(path: Path, question_ids: set[str]) -> dict[str, dict]:
    """question id -> {"answer", "paragraphs": [(title, text)], "supporting": {paragraph index}}"""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            ex = json.loads(line)
            if ex["_id"] not in question_ids:
                continue
            titles = {t for t, _ in ex["supporting_facts"]}
            paras = [(t, "".join(s)) for t, s in ex["context"]]
            out[ex["_id"]] = {"answer": ex["answer"], "paragraphs": paras,
                              "supporting": {i for i, (t, _) in enumerate(paras) if t in titles}}
    missing = question_ids - set(out)
    if missing:
        raise SystemExit(f"{path}: {len(missing)} labelled questions not found, e.g. {sorted(missing)[:3]}")
    return out


def contains_answer(text: str, answer: str) -> bool:
    return _contains(normalize_answer(text).split(), normalize_answer(answer).split())


def prf(pred: pd.Series, gold: pd.Series) -> dict:
    tp = int((pred & gold).sum())
    npred, ngold = int(pred.sum()), int(gold.sum())
    p = tp / npred if npred else float("nan")
    r = tp / ngold if ngold else float("nan")
    f = 2 * tp / (npred + ngold) if npred + ngold else 1.0
    return {"precision": p, "recall": r, "f1": f, "tp": tp, "predicted": npred, "gold": ngold}


def scores(df: pd.DataFrame, col: str) -> dict:
    """Micro P/R/F1 over all pairs and macro (per-question mean) P/R/F1 of boolean column `col` vs `gold`."""
    micro = prf(df[col], df["gold"])
    per_q = [prf(g[col], g["gold"]) for _, g in df.groupby("question_id")]
    macro = {k: float(np.nanmean([q[k] for q in per_q])) if any(np.isfinite(q[k]) for q in per_q) else float("nan")
             for k in ("precision", "recall", "f1")}
    macro["questions_without_prediction"] = int(sum(q["predicted"] == 0 for q in per_q))
    return {"micro": micro, "macro": macro}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, default=Path(SETTINGS.base_path))
    ap.add_argument("--gold", type=Path, default=SETTINGS.shared_data / "hotpotqa" / "hotpot_dev_distractor_200.jsonl")
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "benchmarks" / "hotpotqa_labels.json")
    ap.add_argument("--llm-cache", type=Path, default=None,
                    help="the call cache/journal (SQLite) the run used: per-question solver seconds are then the "
                         "latencies the calls had when they were paid, also for calls this run found cached")
    ap.add_argument("--note", default="", help="free text stored in the JSON (e.g. how the run was produced)")
    args = ap.parse_args()

    labels = read_asset(args.base, "mc_labels")
    pools = read_asset(args.base, "candidate_pools")
    trials = read_asset(args.base, "mc_trials")
    calls = read_asset(args.base, "solver_calls")
    qids = list(dict.fromkeys(labels["question_id"]))
    gold = load_gold(args.gold, set(qids))

    def is_gold(row) -> bool:
        qid, idx = row["doc_id"].rsplit("/", 1)
        return int(idx) in gold[qid]["supporting"]

    pools = pools[pools["question_id"].isin(qids)].copy()
    pools["gold"] = pools.apply(is_gold, axis=1)
    pools["contains_full"] = [contains_answer(gold[q]["paragraphs"][int(d.rsplit("/", 1)[1])][1], gold[q]["answer"])
                              for q, d in zip(pools["question_id"], pools["doc_id"])]
    pools["contains_shown"] = [contains_answer(t, a) for t, a in zip(pools["text"], pools["answer"])]
    gold_total = sum(len(g["supporting"]) for g in gold.values())
    gold_in_pools = int(pools["gold"].sum())

    estimators = {}
    for est, df in labels.groupby("estimator"):
        df = df.merge(pools[["question_id", "doc_id", "gold"]], on=["question_id", "doc_id"], how="left")
        df["yes"] = df["label"] == "YES"
        estimators[est] = {**scores(df, "yes"), "labels": df["label"].value_counts().to_dict(),
                           "yes_per_question": float(df.groupby("question_id")["yes"].sum().mean())}
        # not-NO (YES or UNCERTAIN) as a looser reading of the same labels
        df["not_no"] = df["label"] != "NO"
        estimators[est]["yes_or_uncertain"] = scores(df, "not_no")

    per_q = labels.drop_duplicates("question_id").set_index("question_id")[["base_success_rate", "success_rate"]]
    ok = calls[calls["status"] == "ok"]
    paid = ok[~ok["cached"].astype(bool)]
    trials_q = trials.groupby("question_id").size()
    calls_q = calls.groupby("question_id").size()
    solver_s_q = paid.groupby("question_id")["latency_s"].sum().reindex(qids).fillna(0.0)
    journal = {}
    if args.llm_cache is not None:
        import sqlite3
        con = sqlite3.connect(f"file:{args.llm_cache}?mode=ro", uri=True)
        journal = dict(con.execute("select key, latency_s from llm_calls where status = 'ok'").fetchall())
        con.close()
        paid_s = ok.assign(paid_s=ok["call_key"].map(journal)).groupby("question_id")["paid_s"].sum()
        solver_when_paid_q = paid_s.reindex(qids).fillna(0.0)
    yes_no = sum(normalize_answer(g["answer"]) in ("yes", "no") for g in gold.values())

    result = {
        "benchmark": PARTITION, "questions": len(qids), "pool_size": int(pools.groupby("question_id").size().mean()),
        "base_path": str(args.base), "note": args.note,
        "gold": {"supporting_paragraphs": gold_total, "in_pools": gold_in_pools,
                 "yes_no_answers": yes_no},
        "estimators": estimators,
        "answer_containment_baseline": {"full_paragraph": scores(pools, "contains_full"),
                                        "text_shown_to_solver": scores(pools, "contains_shown")},
        "success": {"base_success_rate_mean": float(per_q["base_success_rate"].mean()),
                    "success_rate_mean": float(per_q["success_rate"].mean()),
                    "questions_never_solved": int((trials.groupby("question_id")["success"].sum() == 0).sum()),
                    "per_question": {q: {"base": float(r.base_success_rate), "overall": float(r.success_rate)}
                                     for q, r in per_q.iterrows()}},
        "trials_per_question": float(trials_q.mean()),
        "calls_per_question": float(calls_q.mean()),
        "calls": {"total": len(calls), "ok": len(ok), "errors": int((calls["status"] == "error").sum()),
                  "cache_hits": int(ok["cached"].astype(bool).sum()),
                  "cache_hit_rate": float(ok["cached"].astype(bool).mean()) if len(ok) else float("nan"),
                  "paid_calls": len(paid),
                  "mean_latency_s_paid": float(paid["latency_s"].mean()) if len(paid) else None,
                  "prompt_tokens_mean": float(ok["prompt_tokens"].mean()) if len(ok) else None},
        "solver_seconds_per_question_paid": float(solver_s_q.mean()),
        "solver_seconds_per_question_when_paid": float(solver_when_paid_q.mean()) if journal else None,
        "journal_calls_matched": int(ok["call_key"].isin(journal).sum()) if journal else None,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=float))

    def line(name, s):
        m, a = s["micro"], s["macro"]
        return (f"  {name:32s} micro P {m['precision']:.3f} R {m['recall']:.3f} F1 {m['f1']:.3f} "
                f"({m['tp']}/{m['predicted']} predicted, {m['gold']} gold) | macro P {a['precision']:.3f} "
                f"R {a['recall']:.3f} F1 {a['f1']:.3f}")
    print(f"{len(qids)} questions, pool {result['pool_size']}, gold paragraphs {gold_total} ({gold_in_pools} in pools)")
    for est, s in estimators.items():
        print(line(f"YES [{est}]", s), s["labels"])
    print(line("answer containment (full text)", result["answer_containment_baseline"]["full_paragraph"]))
    print(line("answer containment (shown text)", result["answer_containment_baseline"]["text_shown_to_solver"]))
    print(f"  success: base {result['success']['base_success_rate_mean']:.3f} overall "
          f"{result['success']['success_rate_mean']:.3f}; never solved {result['success']['questions_never_solved']}")
    print(f"  trials/q {result['trials_per_question']:.1f}, calls/q {result['calls_per_question']:.1f}, "
          f"solver s/q {result['solver_seconds_per_question_paid']:.1f} (when paid: "
          f"{result['solver_seconds_per_question_when_paid'] or float('nan'):.1f}), cache hits {result['calls']['cache_hits']}"
          f"/{result['calls']['ok']} ({result['calls']['cache_hit_rate']:.0%})")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
