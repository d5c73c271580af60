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
from causal_assets.core.labeling.solver import BlindSolver, LikelihoodSolver
from causal_assets.core.llm.cache import CallCache
from causal_assets.core.llm.client import LLMClient
from causal_assets.core.llm.errors import LLMError, LLMInfrastructureError
from causal_assets.core.llm.scoring import EndpointScorer
from tests.conftest import load_scaled_s
from tests.helpers.endpoint import FakeEndpoint, FakeOpenAI, closed_port_url, send_json, status

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


# Likelihood trials scored by an endpoint (what `causal-assets label` runs with CAUSAL_ASSETS_LLM_BASE_URL set)
SCORING = LabelingParams(estimator="regression", outcome="likelihood", budget=24, batch=8)
KEY = "sk-never-shown-4f2a9c"
GIVE_UP_S = 2.0


def _nan_logprobs(h) -> None:
    """An echo whose every log-probability is NaN (valid JSON for Python's parser, no log-probability)."""
    text = h.body.get("prompt", "")
    send_json(h, {"id": "c", "object": "text_completion", "created": 1, "model": "fake-model", "choices": [{
        "index": 0, "text": text, "finish_reason": "length", "logprobs": {
            "tokens": list(text), "text_offset": list(range(len(text))),
            "token_logprobs": [None] + [float("nan")] * (len(text) - 1)}}]})


def _label_by_scores(url: str, tmp_path, lines: list[str] | None = None):
    bound = {} if lines is None else {"give_up_after_s": GIVE_UP_S, "notify": lines.append}
    client = LLMClient(url, "fake-model", api_key=KEY, cache=CallCache(tmp_path / "c.db"), backoff_s=0.05,
                       max_backoff_s=0.2, **bound)
    scorer = EndpointScorer(client, "fake-model", CallCache(tmp_path / "c.db"), mode="echo")
    return label_question("q1", QUESTION, "Zanzibar", POOL, LikelihoodSolver(scorer, "answer_containment"), SCORING)


@pytest.mark.parametrize("respond, what", [
    (status(500, "internal boom"), "HTTP 500 (server error)"),
    (lambda h: send_json(h, b'{"id": "x", "choices": [ oops'), "malformed response"),
    (_nan_logprobs, "malformed response"),
], ids=["http-500", "bad-json", "nan-logprobs"])
def test_an_endpoint_failing_every_attempt_ends_labelling_within_the_give_up_bound(tmp_path, respond, what):
    """Every call failing: the labelling ends once attempts have failed in a row for the bound (plus the last
    attempt), saying what failed and where, with retry lines on the way. Without a bound across calls, each of a
    question's calls runs all its retries, batch after batch, and the step is retried twice more."""
    lines: list[str] = []
    with FakeEndpoint(respond) as server:
        t0 = time.monotonic()
        with pytest.raises(LLMInfrastructureError) as e:
            _label_by_scores(server.url, tmp_path, lines)
        elapsed = time.monotonic() - t0
    assert e.value.gave_up and e.value.final
    assert elapsed < GIVE_UP_S + load_scaled_s(1.5), elapsed
    message = str(e.value)
    assert f"the LLM endpoint {server.url} failed every attempt for" in message and what in message, message
    assert "gave up after 2 s" in message and KEY not in message
    assert lines and all(server.url in line and KEY not in line for line in lines)
    assert "retrying in" in lines[0] and "giving up after 2 s" in lines[0]


def test_a_closed_port_is_named_connection_refused(tmp_path):
    url = closed_port_url()
    with pytest.raises(LLMInfrastructureError) as e:
        _label_by_scores(url, tmp_path, [])
    assert e.value.gave_up and url in str(e.value) and "connection refused" in str(e.value), str(e.value)


@pytest.mark.parametrize("code", [401, 403])
def test_an_auth_refusal_ends_labelling_at_its_first_request_without_advising_a_rerun(tmp_path, code):
    """A bad key: one request, never retried (the next request, or a re-run, meets the same refusal): not each
    request of three batches, with the step retried twice, ending in "re-run to resume"."""
    with FakeEndpoint(status(code, "invalid api key")) as server:
        with pytest.raises(LLMInfrastructureError) as e:
            _label_by_scores(server.url, tmp_path)
    assert e.value.kind == "auth" and e.value.final and len(server.requests) == 1
    message = str(e.value)
    assert f"at {server.url} failed after 1 attempt(s) [auth]: HTTP {code}" in message, message
    assert "check the API key" in message and "re-run" not in message and KEY not in message


def test_a_generating_solver_stops_at_an_auth_refusal_too(tmp_path):
    with FakeEndpoint(status(401, "invalid api key")) as server:
        client = _client(server.url, tmp_path / "c.db", max_concurrency=1)
        with pytest.raises(LLMInfrastructureError) as e:
            label_question("q1", QUESTION, "Zanzibar", POOL, BlindSolver(client, "answer_containment"), CONFIG)
    assert e.value.kind == "auth" and len(server.requests) == 1


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
