"""The regression gate and run comparison (`core/evaluation/gate.py`) on stored per-query values: a large
significant drop fails naming the figure, a drop within noise or the threshold passes and says so, no baseline
passes, and `accept` / `resolve` / `compare_runs` read what the evaluation stores."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from upath import UPath

from causal_assets.core.evaluation import gate as gates
from causal_assets.core.registry.gate import GateSpec


def values(scores: dict[str, float], retriever: str = "bm25", metric: str = "ndcg", k: int = 10) -> pd.DataFrame:
    return pd.DataFrame([{"benchmark": "b", "split": "test", "truth": "qrels", "retriever": retriever,
                          "query_id": q, "metric": metric, "k": k, "value": v} for q, v in scores.items()])


def stored(frame: pd.DataFrame, run: str) -> pd.DataFrame:
    return frame.assign(run_id=run, config_version="", evaluated_at=0.0)


RNG = np.random.default_rng(3)
BASE = {f"q{i}": float(v) for i, v in enumerate(RNG.uniform(0.3, 0.9, 40))}


def test_a_large_significant_drop_fails_naming_retriever_metric_delta_interval_and_p():
    worse = {q: max(0.0, v - 0.3) for q, v in BASE.items()}
    outcome = gates.check_gate(GateSpec(), values(worse), stored(values(BASE), "r1"), None, "test")
    assert not outcome.passed and outcome.retriever == "bm25"
    line = outcome.message
    assert line.startswith("regression: bm25 ndcg@10 on `test` (truth qrels)") and "Δ -0.3" in line
    assert "p 0.0" in line and "[-0.3" in line and "on 40 questions" in line


def test_an_unchanged_run_passes_with_no_drop():
    outcome = gates.check_gate(GateSpec(), values(BASE), stored(values(BASE), "r1"), None, "test")
    assert outcome.passed and "Δ +0.0000" in outcome.message and "no drop" in outcome.message


def test_a_drop_within_noise_passes_and_says_so():
    # three questions fall a lot, three rise almost as much: the mean drops beyond 0.02, not significantly
    noisy = dict(BASE)
    for q in ("q0", "q1", "q2"):
        noisy[q] = BASE[q] - 0.5
    for q in ("q3", "q4", "q5"):
        noisy[q] = BASE[q] + 0.2
    outcome = gates.check_gate(GateSpec(), values(noisy), stored(values(BASE), "r1"), None, "test")
    d = outcome.differences[0]
    assert -d.delta > 0.02 and d.p >= 0.05
    assert outcome.passed and "a drop within noise" in outcome.message


def test_a_small_significant_drop_within_the_threshold_passes():
    smaller = {q: v - 0.01 for q, v in BASE.items()}
    outcome = gates.check_gate(GateSpec(), values(smaller), stored(values(BASE), "r1"), None, "test")
    assert outcome.passed and "within the threshold 0.02 (significant, but small)" in outcome.message


def test_no_baseline_passes_and_the_selected_tuned_retriever_is_gated_by_default():
    outcome = gates.check_gate(GateSpec(), values(BASE), None, "hybrid", "test")
    assert outcome.passed and "no accepted baseline" in outcome.message and outcome.retriever == "hybrid_tuned"


def test_the_registry_section_is_typed_and_strict():
    assert GateSpec.model_validate({"metrics": ["MAP@5"]}).metrics == ["map@5"]
    for bad in ({"min_drop": float("nan")}, {"thershold": 1}, {"metrics": ["ndcg"]}, {"alpha": 1.5}):
        with pytest.raises(ValueError):
            GateSpec.model_validate(bad)


def test_accept_resolve_and_compare_read_the_stored_runs(tmp_path):
    base = UPath(tmp_path)
    with pytest.raises(gates.NoBaseline, match="no stored evaluation"):
        gates.accept(base, "b")
    gates.write_history(base, "b", "run-one", values(BASE), "v1")
    worse = {q: v - (0.4 if q == "q7" else 0.0) for q, v in BASE.items()}
    gates.write_history(base, "b", "run-two", values(worse), "v2")
    accepted = gates.accept(base, "b", "run-one")
    assert set(accepted["run_id"]) == {"run-one"}
    assert set(gates.read_baseline(base, "b")["run_id"]) == {"run-one"}
    name, latest = gates.resolve(base, "b@latest")
    assert set(latest["run_id"]) == {"run-two"} and "run run-two" in name
    _, by_version = gates.resolve(base, "b@v1")
    [d] = gates.compare_runs(gates.resolve(base, "b")[1], latest)
    assert d.worse[0][0] == "q7" and d.worse[0][1] == pytest.approx(-0.4) and not d.better
    assert set(by_version["run_id"]) == {"run-one"}


def test_compare_leaves_out_the_answer_utility_s_references():
    """`@random` draws from the documents the run's retrievers returned: it moves when a retriever changes, and is
    not a retriever to compare; the retrievers' own figures are compared as ever."""
    a = pd.concat([values(BASE, "hybrid"), values(BASE, "@random", "answer_gain", 3)])
    moved = {q: v - 0.5 for q, v in BASE.items()}
    b = pd.concat([values(moved, "hybrid"), values(moved, "@random", "answer_gain", 3)])
    a["truth"] = b["truth"] = np.where(a["metric"] == "answer_gain", "answers", "qrels")
    diffs = gates.compare_runs(a, b)
    assert [(d.retriever, d.metric) for d in diffs] == [("hybrid", "ndcg@10")]
    assert diffs[0].delta == pytest.approx(-0.5)
