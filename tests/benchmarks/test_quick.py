"""Every script of the performance suite (`benchmarks/`) runs its `--quick` smoke run to the end and writes its
JSON where `--out` says: a script that no longer runs fails here, not on the day its figure is reproduced. The
scripts read shared data through the settings and skip without it; the figures of a quick run are not compared
with the targets (small inputs, few repeats, a shared machine)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HOTPOT, SCIFACT, load_scaled_s, require

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

RESULT = {"topic", "quick", "machine_start", "figures", "details"}   # common.write_result's JSON

# script -> (extra arguments, shared data it reads, the JSON it writes under --out, its top-level keys)
QUICK = {
    "bm25_qps": ([], [SCIFACT], "bm25_qps_quick.json", RESULT),
    "build_rates": ([], [], "build_rates_quick.json", RESULT),
    "cli_timings": ([], [], "cli_timings_quick.json", RESULT),
    "dense_latency": ([], [SCIFACT], "dense_latency_quick.json", RESULT),
    "embedding_backends": ([], [SCIFACT], "embedding_backends_quick.json", RESULT),
    "embedding_throughput": ([], [], "embedding_throughput_quick.json", RESULT),
    "evaluate_beir": ([], [SCIFACT], "evaluate_scifact_test_bm25_quick.json", {"benchmark", "quick", "metrics"}),
    "hotpotqa_evidence": ([], [HOTPOT], "hotpotqa_evidence_quick.json", {"quick", "results"}),
    "incremental_reindex": ([], [SCIFACT], "incremental_reindex_quick.json", RESULT),
    "label_quality": (["--dataset", "hotpotqa"], [HOTPOT], "label_quality_hotpotqa_quick.json",
                      {"dataset", "quick", "summary", "calls_per_question", "per_question"}),
    "mc_simulation": ([], [], "mc_simulation_quick.json", {"topic", "quick", "figures", "summary"}),
    "metrics_speed": ([], [], "metrics_speed_quick.json", RESULT),
    "query_latency": ([], [SCIFACT, HOTPOT], "query_latency_quick.json", RESULT),
    "scaling": ([], [SCIFACT, HOTPOT], "scaling_quick.json", RESULT),
    "run_all": (["--only", "metrics_speed"], [], "metrics_speed_quick.json", RESULT),
}

# Kept in the suite but without a quick run: what they measure needs hours of materialized assets or is itself the
# long run.
NOT_QUICK = {
    "lineage_e2e": "its figure is the cold default lineage itself (about 5 minutes quiet, the LLM labelling included)",
    "retrieval_targets": "reads the tuned and evaluated assets of every benchmark (hours of tuning to produce)",
    "tuned_retrievers": "tunes on a materialized benchmark index with its graph (a multi-hop benchmark's assets)",
    "causal_gate": "reads tuned_retrievers' store and scores with the LLM on a materialized multi-hop benchmark",
    "learned_fold_seeds": "tunes the learned model on materialized multi-hop benchmarks, scoring through the LLM",
    "binding_parity": "compares another llama.cpp binding, installed in a venv of its own, with the shipped one",
    "answer_utility": "reads a benchmark's evaluated answer utility and tuned configuration (an hour of LLM scoring)",
    "own_documents": "labels a folder's questions with the LLM, twice with --retest (tens of minutes on the man pages)",
    "celery_workers": "starts Redis, PostgreSQL and Celery workers and labels through them (what test_celery.py "
                      "checks quickly)",
}
LIBRARIES = {"common", "synthetic_corpus"}   # imported by the scripts, not run


def test_every_script_is_smoke_run_or_says_why_not():
    scripts = {p.stem for p in BENCHMARKS.glob("*.py")} - LIBRARIES
    assert scripts == set(QUICK) | set(NOT_QUICK)
    assert not set(QUICK) & set(NOT_QUICK)


@pytest.fixture(scope="module")
def quick_cache(tmp_path_factory) -> Path:
    """Where the quick runs keep the small indexes they build (`--quick-cache`): each corpus's first chunks are
    chunked, indexed and embedded once for the module, by the first script that needs them, not once per script."""
    return tmp_path_factory.mktemp("quick_cache")


@pytest.mark.slow
@pytest.mark.parametrize("script", [pytest.param(s, marks=pytest.mark.llm) if s == "label_quality" else s
                                    for s in QUICK])
def test_quick_run_writes_its_json(script, tmp_path, models_dir, quick_cache):
    extra, data, written, keys = QUICK[script]
    for path in data:
        require(path)
    out = tmp_path / "out"
    target = ["--out", str(out / written)] if script == "label_quality" else ["--out", str(out)]
    if "quick_base(" in (BENCHMARKS / f"{script}.py").read_text():
        target += ["--quick-cache", str(quick_cache)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if script == "label_quality":
        env["CAUSAL_ASSETS_MODELS_DIR"] = str(models_dir)   # the session's assembled Gemma-3-270M
    done = subprocess.run([sys.executable, str(BENCHMARKS / f"{script}.py"), "--quick", *extra, *target],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=load_scaled_s(300))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / written).read_text())
    assert keys <= set(result), sorted(result)
    assert result["quick"] is True
    if "figures" in result:
        assert result["figures"]
    if script == "run_all":
        assert "| metrics_speed (quick) |" in (out / "SUMMARY.md").read_text()


MANPAGES = HOTPOT.parents[1] / "manpages"


@pytest.mark.parametrize("script, flags, data, message", [
    ("label_quality", ["--dataset", "musique", "--budget", "4"], HOTPOT.parents[1] / "musique",
     "monte_carlo.budget: budget 4 cannot decide a label of a pool of 20 documents"),
    ("label_quality", ["--dataset", "hotpotqa", "--budget", "0"], HOTPOT,
     "monte_carlo.budget must be a whole number from 1 to 10,000"),
    ("label_quality", ["--dataset", "hotpotqa", "--budget", "many"], HOTPOT,
     "monte_carlo.budget must be a whole number from 1 to 10,000"),
    ("own_documents", ["--folder", str(MANPAGES / "docs"), "--questions", str(MANPAGES / "questions.jsonl"),
                       "--budget", "4"], MANPAGES,
     "monte_carlo.budget: budget 4 cannot decide a label of a pool of 12 documents"),
])
def test_a_benchmark_refuses_a_budget_the_product_refuses_before_any_solver_call(tmp_path, script, flags, data,
                                                                                 message):
    require(data)
    cache = tmp_path / "calls.sqlite"
    extra = ["--cache", str(cache)] if script == "label_quality" else []
    done = subprocess.run([sys.executable, str(BENCHMARKS / f"{script}.py"), *flags, *extra,
                           "--out", str(tmp_path / "out.json")], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=load_scaled_s(120))
    assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr   # one line, no traceback
    assert not cache.exists() and not (tmp_path / "out.json").exists()   # no solver loaded, nothing written
