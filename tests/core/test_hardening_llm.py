"""Issue 15, finding 5: a 200 answer that is an error text, a trickling endpoint, a 20 MB completion, and a cache key
that names the endpoint. Real HTTP servers on 127.0.0.1."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from causal_assets.core.llm import CallCache, LLMClient, LLMInfrastructureError, make_key
from tests.core.test_llm import FakeOpenAI, chat_completion

MODEL = "fake-model"
MSGS = [{"role": "user", "content": "Who wrote Killing Pablo?"}]


class Scripted:
    """A server whose chat endpoint answers with `behaviour(handler)`."""

    def __init__(self, behaviour):
        outer = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests += 1
                try:
                    behaviour(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _json(h, payload, extra_headers=None):
    data = json.dumps(payload).encode()
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    for k, v in (extra_headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(data)


@pytest.mark.parametrize("payload", [
    chat_completion("Error: upstream model overloaded"),
    chat_completion("Internal Server Error - try again later"),
    {**chat_completion("Pablo Escobar"), "error": {"message": "upstream overloaded"}},
])
def test_a_200_error_text_is_an_infrastructure_error_never_cached_as_ok(tmp_path, payload):
    cache = CallCache(tmp_path / "c.sqlite")
    with Scripted(lambda h: _json(h, payload)) as server:
        client = LLMClient(server.url, MODEL, cache=cache, backoff_s=0.01, max_retries=2)
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat(MSGS, max_tokens=8)
        assert e.value.kind == "error_text" and server.requests == 3
    key = client.key_for("chat", MSGS, max_tokens=8)
    assert cache.get(key) is None                             # a later run asks again instead of replaying it
    assert [r.status for r in cache.history(key)] == ["error"]


def test_a_real_answer_starting_like_an_error_word_is_kept():
    with FakeOpenAI() as fake:
        client = LLMClient(fake.url, MODEL, max_retries=0)
        assert client.chat([{"role": "user", "content": "Errors in physics"}]).text == "echo: Errors in physics"


def test_cache_key_names_the_endpoint_so_a_fixed_endpoint_is_asked_again(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    with FakeOpenAI() as good, FakeOpenAI() as other:
        a = LLMClient(good.url, MODEL, cache=cache)
        b = LLMClient(other.url, MODEL, cache=cache)
        assert not a.chat(MSGS).cached and not b.chat(MSGS).cached   # not served the other endpoint's answer
        assert a.chat(MSGS).cached
        assert len(good.requests) == 1 and len(other.requests) == 1
    # make_key's positional signature is unchanged (and without an endpoint gives the key it always gave)
    assert make_key(MODEL, "chat", MSGS, {"max_tokens": 8}) == make_key(MODEL, "chat", MSGS, {"max_tokens": 8},
                                                                        endpoint=None)
    assert make_key(MODEL, "chat", MSGS, {}, endpoint="http://H:1/v1/") == make_key(MODEL, "chat", MSGS, {},
                                                                                     endpoint="http://h:1/v1")


def test_a_key_the_endpoint_echoes_in_an_answer_is_masked_before_it_is_kept(tmp_path):
    """An endpoint that puts the request's headers into a 200 answer: the key reached the answer, the call cache,
    the causal_search table and the report (only error paths were redacted)."""
    key = "PROBE2KEYxyz123"

    def echo_headers(h):
        _json(h, chat_completion(f"headers: {{'authorization': '{h.headers.get('Authorization')}'}}"))

    cache = CallCache(tmp_path / "c.sqlite")
    with Scripted(echo_headers) as server:
        answer = LLMClient(server.url, MODEL, api_key=key, cache=cache, max_retries=0).chat(MSGS)
    assert "Bearer ***REDACTED***" in answer.text and key not in answer.text
    assert key.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())   # the cache and its WAL


def test_credentials_in_the_base_url_are_refused_by_the_client():
    with pytest.raises(ValueError, match=r"LLM base URL http://\*\*\*REDACTED\*\*\*@127.0.0.1:9/v1 carries credentials"):
        LLMClient("http://alice:hunter2pw@127.0.0.1:9/v1", MODEL)


def _trickle(h):
    data = json.dumps(chat_completion("Pablo Escobar")).encode()
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    for i in range(len(data)):                  # one byte every 0.3 s: each read is well within the read timeout
        h.wfile.write(data[i:i + 1])
        h.wfile.flush()
        time.sleep(0.3)


def _trickle_headers(h):
    h.wfile.write(b"HTTP/1.1 200 OK\r\nX-Pad: ")
    for _ in range(30):                         # the headers alone take 6 s; httpx's read timeout never trips
        h.wfile.flush()
        time.sleep(0.2)
        h.wfile.write(b"a")


@pytest.mark.parametrize("trickle", [_trickle, _trickle_headers], ids=["body", "headers"])
def test_a_trickling_endpoint_is_cut_off_at_the_total_deadline(tmp_path, trickle):
    """A body trickled a byte at a time was cut at the deadline; headers trickled the same way held the call for
    as long as the server liked (an endpoint probe), until a watchdog shut the connection at the deadline."""
    with Scripted(trickle) as server:
        client = LLMClient(server.url, MODEL, cache=CallCache(tmp_path / "c.sqlite"), timeout_s=1, max_retries=0)
        t0 = time.monotonic()
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat(MSGS)
        elapsed = time.monotonic() - t0
    assert e.value.kind == "timeout"
    assert elapsed < 3, elapsed                 # the body alone would take > 60 s at this pace


def _huge(h, chunked: bool):
    piece = b" " * (1 << 20)
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    if chunked:
        h.send_header("Transfer-Encoding", "chunked")
    else:
        h.send_header("Content-Length", str(20 * len(piece) + 2))
    h.end_headers()
    for part in [b"{"] + [piece] * 20 + [b"}"]:
        h.wfile.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
    if chunked:
        h.wfile.write(b"0\r\n\r\n")


@pytest.mark.parametrize("chunked", [False, True])
def test_a_20_mb_completion_is_refused(tmp_path, chunked):
    cache = CallCache(tmp_path / "c.sqlite")
    with Scripted(lambda h: _huge(h, chunked)) as server:
        client = LLMClient(server.url, MODEL, cache=cache, max_retries=3, backoff_s=0.01,
                           max_response_bytes=2 * 1024 * 1024)
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat(MSGS)
        assert e.value.kind == "too_large" and server.requests == 1    # not retried
    assert (tmp_path / "c.sqlite").stat().st_size < 1024 * 1024         # nothing of it stored


def test_an_assembly_killed_midway_leaves_no_gguf_that_later_runs_would_take(tmp_path, monkeypatch):
    """Gemma's GGUF is assembled from four wheels on first use. A run killed mid-write (here: the write fails after
    a first block) must leave nothing at the model's path, or every later run would load a truncated file; the next
    first use assembles the real file (sha256-checked)."""
    import importlib

    from causal_assets.core.llm.models import LOCAL_MODELS, local_model_path

    package = importlib.import_module(LOCAL_MODELS["gemma3-270m"].package)
    real_assemble = package.assemble

    def killed(path, overwrite=False):
        with open(path, "wb") as f:
            f.write(b"GGUF" + b"\0" * 4096)
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(package, "assemble", killed)
    with pytest.raises(KeyboardInterrupt):
        local_model_path("gemma3-270m", tmp_path)
    assert list(tmp_path.iterdir()) == []                 # neither the model's name nor a leftover partial file
    monkeypatch.setattr(package, "assemble", real_assemble)
    path = local_model_path("gemma3-270m", tmp_path)
    assert path.stat().st_size > 200e6 and [p.name for p in tmp_path.iterdir()] == [path.name]
