"""A misbehaving OpenAI-compatible endpoint: a 200 answer that is an error text, a body or headers trickled a byte at a
time, a 20 MB completion, filtered completions, impossible log-probabilities, auth and config failures read as
"cannot score", invalid JSON, a gzip bomb, a key prefix left by cutting a message before redacting it; and cache keys
that name the endpoint. Real HTTP servers on 127.0.0.1."""
from __future__ import annotations

import gzip
import json
import logging
import time

import pytest

from causal_assets.core.llm import CallCache, LLMClient, LLMInfrastructureError, make_key
from causal_assets.core.llm.errors import LLMRequestError
from causal_assets.core.llm.scoring import EndpointScorer, LlamaCppScorer, ScoreRequest, ScoringUnsupported
from causal_assets.resources import LLM
from tests.helpers.endpoint import FakeEndpoint, FakeOpenAI, chat_completion, send_json, status

MODEL = "fake-model"
MSGS = [{"role": "user", "content": "Who wrote Killing Pablo?"}]


@pytest.mark.parametrize("payload", [
    chat_completion("Error: upstream model overloaded"),
    chat_completion("Internal Server Error - try again later"),
    {**chat_completion("Pablo Escobar"), "error": {"message": "upstream overloaded"}},
])
def test_a_200_error_text_is_an_infrastructure_error_never_cached_as_ok(tmp_path, payload):
    cache = CallCache(tmp_path / "c.sqlite")
    with FakeEndpoint(lambda h: send_json(h, payload)) as server:
        client = LLMClient(server.url, MODEL, cache=cache, backoff_s=0.01, max_retries=2)
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat(MSGS, max_tokens=8)
        assert e.value.kind == "error_text" and len(server.requests) == 3
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
    """An endpoint that puts the request's headers into a 200 answer: the key is masked before the answer reaches
    the call cache, the causal_search table or the report, not only on error paths."""
    key = "ECHOEDKEYxyz123"

    def echo_headers(h):
        send_json(h, chat_completion(f"headers: {{'authorization': '{h.headers.get('Authorization')}'}}"))

    cache = CallCache(tmp_path / "c.sqlite")
    with FakeEndpoint(echo_headers) as server:
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
    """A body or headers trickled a byte at a time: the call ends at the total deadline (a watchdog shuts the
    connection), not when the server stops sending."""
    with FakeEndpoint(trickle) as server:
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
    with FakeEndpoint(lambda h: _huge(h, chunked)) as server:
        client = LLMClient(server.url, MODEL, cache=cache, max_retries=3, backoff_s=0.01,
                           max_response_bytes=2 * 1024 * 1024)
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat(MSGS)
        assert e.value.kind == "too_large" and len(server.requests) == 1    # not retried
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


# ---- Filtered completions, impossible log-probabilities, auth failures, gzip bombs ---------------------------------


KEY = "endpointSECRETkey0123456789abcdef"
REQ = ScoreRequest("Question: 1 + 1?\nAnswer:", (" 2",))
SPAN_REQ = ScoreRequest("Question: 1 + 1?\nAnswer:", (" 2",), span=(9, 16))


def _echo(h, value=-1.0, short=False):
    """llama.cpp-style echo of the prompt, 4 characters a token, every value `value` (a raw JSON token if str)."""
    prompt = h.body.get("prompt", "")
    offsets = list(range(0, len(prompt), 4))
    tokens = [prompt[o:o + 4] for o in offsets]
    values = [None] + [value] * (len(tokens) - 1)
    if short:
        values = values[:3]
    body = json.dumps({"id": "x", "object": "text_completion", "created": 1, "model": MODEL,
                       "choices": [{"index": 0, "text": prompt + "x", "finish_reason": "length",
                                    "logprobs": {"tokens": tokens + ["x"], "text_offset": offsets + [len(prompt)],
                                                 "token_logprobs": values + ([] if short else [-0.5]),
                                                 "top_logprobs": None}}]})
    if isinstance(value, str):
        body = body.replace(json.dumps(value), value)
    data = body.encode()
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def _scorer(server, tmp_path, retries=2, **kw):
    client = LLMClient(server.url, MODEL, api_key=KEY, backoff_s=0.01, max_retries=retries, timeout_s=5, **kw)
    return EndpointScorer(client, MODEL, CallCache(tmp_path / "c.sqlite"), mode="echo")


# -- a filtered completion is the endpoint's refusal, not the solver's empty answer ----------------------------------
def test_a_content_filtered_completion_is_refused_never_cached_and_asked_again(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    state = {"filter": True}

    def respond(h):
        body = chat_completion("" if state["filter"] else "Pablo Escobar")
        if state["filter"]:
            body["choices"][0]["finish_reason"] = "content_filter"
        send_json(h, body)

    with FakeEndpoint(respond) as server:
        client = LLMClient(server.url, MODEL, cache=cache, backoff_s=0.01, max_retries=2)
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat(MSGS)
        assert e.value.kind == "refused" and not e.value.transient and len(server.requests) == 1
        assert cache.get(client.key_for("chat", MSGS)) is None
        state["filter"] = False                     # the endpoint recovers: asked again, not served the refusal
        answer = client.chat(MSGS)
    assert answer.text == "Pablo Escobar" and not answer.cached


def _completion(text, finish="stop"):
    return {"id": "x", "object": "text_completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


@pytest.mark.parametrize("answer,finish,kind,requests", [
    ("Error: upstream model overloaded", "stop", "error_text", 3),
    ("", "content_filter", "refused", 1),
], ids=["error-text", "content-filter"])
def test_the_endpoint_scorers_completion_refuses_what_the_client_refuses(tmp_path, answer, finish, kind, requests):
    """The likelihood answer model's greedy answer (`EndpointScorer.complete`) goes through the client's checks: a
    200 error text or a filtered completion raises, is journalled as an error and never served as an answer."""
    with FakeEndpoint(lambda h: send_json(h, _completion(answer, finish))) as server:
        scorer = _scorer(server, tmp_path)
        with pytest.raises(LLMInfrastructureError) as e:
            scorer.complete("Question: 1 + 1?\nAnswer:")
        assert e.value.kind == kind and len(server.requests) == requests
    rows = scorer.cache.history()
    assert [r.status for r in rows] == ["error"] and rows[0].request["kind"] == "complete"
    assert scorer.cache.get(rows[0].key) is None


def test_the_endpoint_scorers_completion_masks_an_echoed_key(tmp_path):
    def echo_headers(h):
        send_json(h, _completion(f" 2 (sent with {h.headers.get('Authorization')})"))

    with FakeEndpoint(echo_headers) as server:
        scorer = _scorer(server, tmp_path)
        text = scorer.complete("Question: 1 + 1?\nAnswer:")
        assert scorer.complete("Question: 1 + 1?\nAnswer:") == text and len(server.requests) == 1   # cached
    assert KEY not in text and "***REDACTED***" in text
    assert KEY.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())   # the cache and its WAL


def test_a_score_response_carrying_an_error_object_is_an_error_never_a_score(tmp_path):
    def respond(h):
        prompt = h.body.get("prompt", "")
        send_json(h, {**_completion(prompt), "error": {"message": "upstream overloaded"},
                  "choices": [{"index": 0, "text": prompt, "finish_reason": "length",
                               "logprobs": {"tokens": [prompt], "text_offset": [0], "token_logprobs": [None]}}]})

    with FakeEndpoint(respond) as server:
        [out] = _scorer(server, tmp_path).score_many([REQ])
    assert isinstance(out, LLMInfrastructureError) and out.kind == "error_text", out


# -- impossible log-probabilities are a malformed response -----------------------------------------------------------
@pytest.mark.parametrize("value,short,req", [("NaN", False, REQ), ("-1e309", False, REQ), ("Infinity", False, REQ),
                                             (7.5, False, REQ), (-1.0, True, REQ), (-1.0, True, SPAN_REQ)],
                         ids=["nan", "-inf", "inf", "positive", "short", "short-span"])
def test_impossible_log_probabilities_are_malformed_retried_and_never_cached(tmp_path, value, short, req):
    with FakeEndpoint(lambda h: _echo(h, value, short)) as server:
        scorer = _scorer(server, tmp_path)
        [out] = scorer.score_many([req])
        assert isinstance(out, LLMInfrastructureError) and out.kind == "malformed", out
        assert len(server.requests) == 3                 # retried like any malformed answer
    assert scorer.cache.get(scorer.key(req)) is None


def test_a_sound_echo_is_scored(tmp_path):
    with FakeEndpoint(_echo) as server:
        [out] = _scorer(server, tmp_path).score_many([SPAN_REQ])
    assert out.logprobs == (-1.0,) and out.span_logprob is not None and out.span_logprob < 0


# -- the scorer's cache key names the endpoint -----------------------------------------------------------------------
def test_the_scorer_key_names_the_endpoint_and_the_in_process_key_the_weights_and_binding(tmp_path):
    with FakeEndpoint(lambda h: _echo(h, -1.0)) as a, FakeEndpoint(lambda h: _echo(h, -2.0)) as b:
        first = _scorer(a, tmp_path).score_many([REQ])[0]
        other = _scorer(b, tmp_path).score_many([REQ])[0]
    assert first.logprobs == (-1.0,) and not other.cached and other.logprobs == (-2.0,)
    # the in-process scorer has no endpoint: its key names the weights' sha256 and the binding instead
    assert LlamaCppScorer.cache_endpoint is None
    local = LlamaCppScorer.__new__(LlamaCppScorer)
    local.model_id, local.weights_sha256, local.binding = "local/gemma3-270m", "ab" * 32, "llama-cpp-python 0.3.36"
    assert local.key(REQ) == make_key("local/gemma3-270m", "score", {"prompt": REQ.prompt, "continuations": [" 2"]},
                                      {"backend": "llama.cpp-inprocess", "weights_sha256": "ab" * 32,
                                       "binding": "llama-cpp-python 0.3.36"})


# -- failures of the endpoint are failures, not "cannot score" -------------------------------------------------------
@pytest.mark.parametrize("respond,error,kind,requests", [
    (status(401), LLMInfrastructureError, "auth", 1),
    (status(403), LLMInfrastructureError, "auth", 1),
    (status(404, "model fake-model not found"), LLMInfrastructureError, "config", 1),
    (status(400), LLMRequestError, None, 1),
    (lambda h: send_json(h, {"id": "x", "object": "text_completion"}), LLMInfrastructureError, "malformed", 3),
    (lambda h: send_json(h, {"id": "x", "choices": []}), LLMInfrastructureError, "malformed", 3),
    (status(503, "upstream overloaded"), LLMInfrastructureError, "server_error", 3),
    (lambda h: h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n"
                             b"{not json"), LLMInfrastructureError, "malformed", 3),
], ids=["401", "403", "404", "400", "nochoices", "emptychoices", "503", "badjson"])
def test_endpoint_failures_are_classified_as_the_client_does(tmp_path, respond, error, kind, requests):
    with FakeEndpoint(respond) as server:
        try:
            [out] = _scorer(server, tmp_path).score_many([REQ])
            raised = False
        except LLMInfrastructureError as e:
            out, raised = e, True
        # a refusal of every request (bad key, URL or model) ends the batch; any other failure is in its place
        assert raised == (kind in ("auth", "config")), out
        assert type(out) is error, out
        assert kind is None or out.kind == kind
        assert len(server.requests) == requests
        with pytest.raises(error):                  # not "use lexical"
            LLM(base_url=server.url, model=MODEL, api_key="none", max_retries=0,
                cache_path=str(tmp_path / "r.sqlite")).scores_prompts()


def test_a_chat_only_endpoint_still_cannot_score(tmp_path):
    with FakeEndpoint(status(404, "This is a chat model and not supported in the v1/completions endpoint")) as server:
        with pytest.raises(ScoringUnsupported, match="chat model"):
            _scorer(server, tmp_path).score_many([REQ])


def test_a_scorer_error_names_the_status_and_a_redacted_excerpt(tmp_path):
    with FakeEndpoint(status(500, "boom " + "z" * 3000 + KEY)) as server:
        [out] = _scorer(server, tmp_path, retries=0).score_many([REQ])
    assert "500" in str(out) and "boom" in str(out) and len(str(out)) < 2500
    assert KEY[:10] not in str(out)


# -- slow headers are under the total deadline: test_a_trickling_endpoint_is_cut_off_at_the_total_deadline above


# -- the size cap counts the decoded body ----------------------------------------------------------------------------
def _gzip(h, payload: bytes):
    data = gzip.compress(payload, compresslevel=9)
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Encoding", "gzip")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def test_a_gzip_bomb_is_refused_by_its_decoded_size(tmp_path):
    answer = json.dumps(chat_completion("Pablo Escobar")).encode()
    bomb = answer[:-1] + b" " * (20 << 20) + answer[-1:]    # 20 MB of JSON, ~20 KB compressed
    seen = []

    def respond(h):
        seen.append(h.headers.get("Accept-Encoding"))
        _gzip(h, bomb if h.body["messages"][0]["content"] == "bomb" else answer)

    with FakeEndpoint(respond) as server:
        client = LLMClient(server.url, MODEL, max_retries=3, backoff_s=0.01, max_response_bytes=2 << 20)
        assert client.chat(MSGS).text == "Pablo Escobar"     # a small compressed answer still reads
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat([{"role": "user", "content": "bomb"}])
        assert e.value.kind == "too_large" and len(server.requests) == 2
    assert seen == ["identity", "identity"]


# -- a message is redacted before it is cut --------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    {"error": {"message": "x" * 270 + " token=" + KEY + " rejected"}},
    chat_completion("Error: upstream rejected " + "y" * 160 + " key=" + KEY),
], ids=["error-object", "error-text"])
def test_a_key_across_the_cut_of_an_error_message_leaves_no_prefix(tmp_path, caplog, body):
    caplog.set_level(logging.DEBUG)
    with FakeEndpoint(lambda h: send_json(h, body)) as server:
        client = LLMClient(server.url, MODEL, api_key=KEY, cache=CallCache(tmp_path / "c.sqlite"), max_retries=1,
                           backoff_s=0.01)
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat(MSGS)
    assert e.value.kind == "error_text" and "=***REDACT" in str(e.value)     # masked, then cut
    prefix = KEY[:10]
    assert prefix not in str(e.value) and prefix not in caplog.text
    assert prefix.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())   # the cache and its WAL
