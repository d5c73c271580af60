"""The labelling loop under faults, against a real HTTP server on 127.0.0.1 that acts as a planted-truth solver:
it echoes its prompt, so the answer is "correct" exactly when the document holding it is in the subset."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.foundation.errors import ConfigError
from causal_assets.core.labeling.runner import LabelingParams, label_question
from causal_assets.core.labeling.solver import BlindSolver
from causal_assets.core.llm.cache import CallCache
from causal_assets.core.llm.client import LLMClient
from causal_assets.core.llm.errors import LLMError
from tests.helpers.endpoint import FakeOpenAI

QUESTION = "Which island did the expedition finally reach?"
POOL = [(f"d{i}", f"Doc {i}", f"An unrelated note number {i} about weather.") for i in range(5)] + \
       [("gold", "Log", "The expedition finally reached Zanzibar after ninety days.")]
CONFIG = LabelingParams(estimator="adaptive", outcome="success", budget=24, batch=8, threshold=0.1)


def _client(url, cache_path, **kw):
    return LLMClient(url, "fake-model", cache=CallCache(cache_path), backoff_s=0.01, max_backoff_s=0.05, **kw)


def test_planted_solver_labels_the_gold_document(tmp_path):
    with FakeOpenAI() as server:
        out = label_question("q1", QUESTION, "Zanzibar", POOL, BlindSolver(_client(server.url, tmp_path / "c.db"),
                             "answer_containment"), CONFIG)
    labels = out.result.labels()
    assert labels["gold"] == "YES" and all(labels[d] != "YES" for d, _, _ in POOL[:-1])
    assert all(t["success"] == ("gold" in t["subset"]) for t in out.trials)


def test_injected_429_and_timeouts_are_retried_and_never_become_trials(tmp_path):
    script = ["429", "429", ("sleep", 2.0), "500", "badjson"]
    with FakeOpenAI(script=script) as server:
        client = _client(server.url, tmp_path / "c.db", timeout_s=0.5, max_retries=3)
        out = label_question("q1", QUESTION, "Zanzibar", POOL, BlindSolver(client, "answer_containment"), CONFIG)
    assert len(out.trials) == CONFIG.budget                    # every trial comes from an answered call
    assert all(c["status"] == "ok" for c in out.calls)         # faults were absorbed by retries
    assert all(t["success"] == ("gold" in t["subset"]) for t in out.trials)  # no fault counted as a failure


def test_persistent_outage_fails_the_question_without_recording_trials(tmp_path):
    with FakeOpenAI(default="500") as server:
        client = _client(server.url, tmp_path / "c.db", max_retries=1)
        with pytest.raises(LLMError, match="infrastructure errors"):
            label_question("q1", QUESTION, "Zanzibar", POOL, BlindSolver(client, "answer_containment"), CONFIG)


WORKER = textwrap.dedent("""
    import sys
    from causal_assets.core.labeling.runner import LabelingParams, label_question
    from causal_assets.core.labeling.solver import BlindSolver
    from causal_assets.core.llm.cache import CallCache
    from causal_assets.core.llm.client import LLMClient
    from tests.core.test_labeling_faults import CONFIG, POOL, QUESTION
    client = LLMClient(sys.argv[1], "fake-model", cache=CallCache(sys.argv[2]))
    label_question("q1", QUESTION, "Zanzibar", POOL, BlindSolver(client, "answer_containment"), CONFIG)
    print("finished")
""")


@pytest.mark.slow
def test_killed_labelling_resumes_without_losing_or_repaying_a_call(tmp_path):
    cache_path = tmp_path / "calls.db"
    with FakeOpenAI(delay_s=0.15) as server:
        proc = subprocess.Popen([sys.executable, "-c", WORKER, server.url, str(cache_path)],
                                cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 60
        while len(server.requests) < 10 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)  # a real crash, mid-run
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
        paid_before = len(server.requests)
        completed = CallCache(cache_path).stats()["ok"]
        assert 0 < completed <= paid_before < 24

        out = label_question("q1", QUESTION, "Zanzibar", POOL,
                             BlindSolver(_client(server.url, cache_path), "answer_containment"), CONFIG)
    bodies = [json.dumps(r["body"], sort_keys=True) for r in server.requests]
    # Every request was paid for once, except those in flight when the process died (at most max_concurrency=2):
    # they never completed, so they are asked again; completed ones never are.
    assert len(bodies) - len(set(bodies)) <= 2
    assert len(set(bodies)) == len(bodies) - (paid_before - completed)
    assert sum(c["cached"] for c in out.calls) >= completed     # the completed calls came from the cache
    assert len(out.trials) == CONFIG.budget and out.result.labels()["gold"] == "YES"


def test_malformed_benchmark_registry_names_file_and_field(tmp_path):
    p = tmp_path / "benchmarks.yaml"
    p.write_text("benchmarks:\n  - name: x\n    loader: beir\n    corpus: scifact\n    splits: [test]\n    eval_splits: [dev]\n")
    with pytest.raises(ConfigError, match=r"benchmarks.yaml: benchmarks\[0\].*split 'dev' is not one of splits"):
        load_benchmark_registry(p)
    p.write_text("benchmarks:\n  - name: x\n    loader: nope\n")
    with pytest.raises(ConfigError, match=r"benchmarks\[0\].loader: Input should be"):
        load_benchmark_registry(p)
    p.write_text("benchmarks: [\n")
    with pytest.raises(ConfigError, match=r"benchmarks.yaml:\d+: malformed YAML"):
        load_benchmark_registry(p)
    assert "default" in load_benchmark_registry()
