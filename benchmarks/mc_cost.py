"""Monte Carlo labelling cost: solver calls saved by the adaptive estimator against the naive rule at equal label F1
(from the planted-truth simulation), and the real cost per question of any labelling run on disk.

    python benchmarks/mc_cost.py [--quick]

Reads data/benchmarks/mc_simulation.json (calls per question to reach mean label F1 0.95, naive and adaptive, on
the tuning scenario seed and a held-out one); every `solver_calls/<benchmark>*.parquet` under data/ (calls per
question, errors, cached share, median uncached latency, and the summed uncached latency per question, a lower
bound of the step's wall time); and data/benchmarks/hotpotqa_labels.json when present. Writes
data/benchmarks/mc_cost.json.
"""
from __future__ import annotations

import json

import pandas as pd
from common import OUT_DIR, ROOT, Figure, run_script

TARGET_CACHE_HIT = 1.0
TARGET_RATIO = 1 / 3  # the seed's claim: the efficient estimator needs a third of the naive calls


def real_runs() -> dict:
    out = {}
    for path in sorted((ROOT / "data").glob("**/solver_calls/*.parquet")):
        if "lineage_e2e_" in str(path):
            continue
        try:
            calls = pd.read_parquet(path)
        except Exception as exc:  # a file being written by another run
            out[str(path.relative_to(ROOT))] = {"error": repr(exc)}
            continue
        if calls.empty:
            continue
        ok = calls[calls["status"] == "ok"]
        uncached = ok[~ok["cached"].astype(bool)]
        questions = int(calls["question_id"].nunique())
        out[str(path.relative_to(ROOT))] = {
            "questions": questions, "calls": len(calls), "errored_calls": int((calls["status"] != "ok").sum()),
            "calls_per_question": round(len(calls) / max(questions, 1), 2),
            "cache_hit_rate": round(float(ok["cached"].astype(bool).mean()), 4) if len(ok) else None,
            "median_uncached_latency_s": round(float(uncached["latency_s"].median()), 3) if len(uncached) else None,
            "llm_seconds_per_question": round(float(uncached.groupby("question_id")["latency_s"].sum().median()), 2)
            if len(uncached) else None,
            "completion_tokens_per_call": round(float(ok["completion_tokens"].fillna(0).mean()), 1) if len(ok) else None,
            "prompt_tokens_per_call": round(float(ok["prompt_tokens"].fillna(0).mean()), 1) if len(ok) else None}
    return out


def run(quick: bool) -> tuple[list[Figure], dict]:
    sim_path = OUT_DIR / "mc_simulation.json"
    figures: list[Figure] = []
    details: dict = {"simulation": None, "real_runs": real_runs()}
    if sim_path.exists():
        sim = json.loads(sim_path.read_text())
        s = sim["summary"]
        details["simulation"] = {"setup": sim["setup"], "summary": s, "cpu_seconds": sim.get("cpu_seconds")}
        reach = s["calls_to_target"]
        ratio = s["ratio_adaptive_over_naive"]
        figures.append(Figure(f"MC simulation: adaptive / naive solver calls at equal label F1 {s['target_f1']}",
                              round(ratio, 3) if ratio else None, "ratio", round(TARGET_RATIO, 3), "<=",
                              f"naive {reach['naive'] and round(reach['naive'])} vs adaptive "
                              f"{reach['adaptive'] and round(reach['adaptive'])} calls per question "
                              f"({sim['setup']['scenarios']} scenarios, seed {sim['setup']['seed']}, the seed the "
                              f"labeler's defaults were tuned on); calls saved "
                              f"{(1 - ratio) * 100:.0f}%" if ratio else "did not reach the target F1"))
        hold = s.get("holdout")
        if hold:
            hr = hold["ratio_adaptive_over_naive"]
            figures.append(Figure(f"same, held-out scenario seed {hold['seed']}", round(hr, 3) if hr else None,
                                  "ratio", note=f"naive {hold['calls_to_target']['naive'] and round(hold['calls_to_target']['naive'])}"
                                                f" vs adaptive {hold['calls_to_target']['adaptive'] and round(hold['calls_to_target']['adaptive'])}"
                                                " calls per question"))
    labels_path = OUT_DIR / "hotpotqa_labels.json"  # written by hotpotqa_labels.py from a real labelling run
    if labels_path.exists():
        hl = json.loads(labels_path.read_text())
        details["hotpotqa_labels"] = {k: hl.get(k) for k in ("questions", "base_path", "note", "calls_per_question",
                                                             "calls", "solver_seconds_per_question_paid",
                                                             "solver_seconds_per_question_when_paid", "written_at")}
        figures.append(Figure(f"MC solver calls per question, HotpotQA labelling run ({hl['questions']} questions)",
                              hl["calls_per_question"], "calls", note=hl.get("note", "")[:300]))
        figures.append(Figure("MC solver wall time per question with the local server, HotpotQA (calls paid)",
                              round(hl["solver_seconds_per_question_when_paid"], 1)
                              if hl.get("solver_seconds_per_question_when_paid") else None, "s",
                              note="sum of the paid calls' latencies per question, in the run that paid them"))
        calls = hl["calls"]
        figures.append(Figure("solver-call cache hits when the HotpotQA labelling is re-run", calls["cache_hit_rate"],
                              "share", TARGET_CACHE_HIT, ">=", f"{calls['cache_hits']} of {calls['ok']} calls, "
                                                               f"{calls['paid_calls']} paid"))
    for path, r in details["real_runs"].items():
        if "calls_per_question" not in r:
            continue
        figures.append(Figure(f"MC solver calls per question, {path}", r["calls_per_question"], "calls",
                              note=f"{r['questions']} questions, {r['errored_calls']} errored calls, cached share "
                                   f"{r['cache_hit_rate']}, LLM time per question {r['llm_seconds_per_question']} s "
                                   f"(median uncached call {r['median_uncached_latency_s']} s)"))
    return figures, details


def main() -> None:
    run_script("mc_cost", run, __doc__)


if __name__ == "__main__":
    main()
