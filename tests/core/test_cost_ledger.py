"""The cost ledger counts what goes through the call cache: a served hit is a cached call, a journalled ok row a
paid one with its tokens; and the dry-run plan of a labelling run with its ceiling."""
from __future__ import annotations

from upath import UPath

from causal_assets.core.labeling.dry_run import ceiling_problem, plan_labels
from causal_assets.core.labeling.sizing import Machine
from causal_assets.core.llm import ledger
from causal_assets.core.llm.cache import CallCache


def test_the_ledger_counts_paid_and_cached_calls_as_the_cache_journals_them(tmp_path):
    cache = CallCache(tmp_path / "calls.sqlite")
    meter = ledger.Meter.start("b", "stage", "run1")
    for i in range(3):
        assert cache.get(f"k{i}") is None
        cache.put(f"k{i}", "m1", {"i": i}, {"text": "x"}, "x", prompt_tokens=10, completion_tokens=2, latency_s=0.5)
    assert cache.get("k0") is not None and cache.get("k1") is not None
    cache.put("k9", "m1", {}, status="error", error="boom")
    [row] = meter.rows().to_dict("records")
    stats = cache.stats()
    assert row["calls_paid"] == stats["ok"] == 3 and row["calls_errored"] == stats["errors"] == 1
    assert row["calls_cached"] == 2 and row["prompt_tokens"] == stats["prompt_tokens"] == 30
    assert row["completion_tokens"] == 6 and row["cached_prompt_tokens"] == 20 and row["model"] == "m1"
    base = UPath(tmp_path / "parquet")
    ledger.append(base, meter.rows())
    ledger.append(base, meter.rows())   # the same run again replaces its rows
    assert len(ledger.read_ledger(base, "b")) == 1


def test_a_stage_without_calls_has_one_empty_row():
    [row] = ledger.Meter.start("b", "evaluation", "r").rows().to_dict("records")
    assert row["model"] == "" and row["calls_paid"] == 0 and row["wall_seconds"] >= 0


def test_the_dry_run_plan_and_its_ceiling():
    plan = plan_labels("mine", 12, 16, 8, 1000, machine=Machine(2.0, "the solver timed now"))
    assert plan.calls == 192 and plan.expected_calls == 192 and plan.prompt_tokens > 0 and plan.seconds > 0
    assert "12 questions x 16 solver calls = 192 calls" in plan.line() and "about" in plan.line()
    remote = plan_labels("mine", 12, 16, 8, 1000, remote=True)
    assert remote.seconds is None and "depends on the endpoint's latency" in remote.line()
    assert remote.prompt_tokens == plan.prompt_tokens   # the same calls, without timing anything
    assert ceiling_problem(plan, 0) is None and ceiling_problem(plan, 192) is None
    problem = ceiling_problem(plan, 100)
    assert "192 solver calls" in problem and "ceiling of 100 (CAUSAL_ASSETS_LABEL_MAX_CALLS)" in problem
    assert "export CAUSAL_ASSETS_LABEL_MAX_CALLS=192" in problem
