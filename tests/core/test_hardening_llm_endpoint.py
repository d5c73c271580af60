"""A misbehaving OpenAI-compatible endpoint (probe 6): filtered completions, impossible log-probabilities, a scorer
cache without the endpoint, auth/config failures read as "cannot score", invalid JSON, headers trickled a byte at a
time, a gzip bomb, and a key prefix left by cutting a message before redacting it. Real HTTP servers on 127.0.0.1."""
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
from tests.core.test_hardening_llm import MODEL, MSGS, Scripted, _json
from tests.core.test_llm import chat_completion

KEY = "probe6SECRETkey0123456789abcdef"
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


def _status(code, message="fake"):
    def respond(h):
        data = json.dumps({"error": {"message": message, "type": "x"}}).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return respond


def _scorer(server, tmp_path, retries=2, **kw):
    client = LLMClient(server.url, MODEL, api_key=KEY, backoff_s=0.01, max_retries=retries, timeout_s=5, **kw)
    return EndpointScorer(client, MODEL, CallCache(tmp_path / "c.sqlite"), mode="echo")


# -- 1. a filtered completion is the endpoint's refusal, not the solver's empty answer ----------------------------
def test_a_content_filtered_completion_is_refused_never_cached_and_asked_again(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    state = {"filter": True}

    def respond(h):
        body = chat_completion("" if state["filter"] else "Pablo Escobar")
        if state["filter"]:
            body["choices"][0]["finish_reason"] = "content_filter"
        _json(h, body)

    with Scripted(respond) as server:
        client = LLMClient(server.url, MODEL, cache=cache, backoff_s=0.01, max_retries=2)
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat(MSGS)
        assert e.value.kind == "refused" and not e.value.transient and server.requests == 1
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
    with Scripted(lambda h: _json(h, _completion(answer, finish))) as server:
        scorer = _scorer(server, tmp_path)
        with pytest.raises(LLMInfrastructureError) as e:
            scorer.complete("Question: 1 + 1?\nAnswer:")
        assert e.value.kind == kind and server.requests == requests
    rows = scorer.cache.history()
    assert [r.status for r in rows] == ["error"] and rows[0].request["kind"] == "complete"
    assert scorer.cache.get(rows[0].key) is None


def test_the_endpoint_scorers_completion_masks_an_echoed_key(tmp_path):
    def echo_headers(h):
        _json(h, _completion(f" 2 (sent with {h.headers.get('Authorization')})"))

    with Scripted(echo_headers) as server:
        scorer = _scorer(server, tmp_path)
        text = scorer.complete("Question: 1 + 1?\nAnswer:")
        assert scorer.complete("Question: 1 + 1?\nAnswer:") == text and server.requests == 1   # cached
    assert KEY not in text and "***REDACTED***" in text
    assert KEY.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())   # the cache and its WAL


def test_a_score_response_carrying_an_error_object_is_an_error_never_a_score(tmp_path):
    def respond(h):
        prompt = h.body.get("prompt", "")
        _json(h, {**_completion(prompt), "error": {"message": "upstream overloaded"},
                  "choices": [{"index": 0, "text": prompt, "finish_reason": "length",
                               "logprobs": {"tokens": [prompt], "text_offset": [0], "token_logprobs": [None]}}]})

    with Scripted(respond) as server:
        [out] = _scorer(server, tmp_path).score_many([REQ])
    assert isinstance(out, LLMInfrastructureError) and out.kind == "error_text", out


# -- 2. impossible log-probabilities are a malformed response ---------------------------------------------------
@pytest.mark.parametrize("value,short,req", [("NaN", False, REQ), ("-1e309", False, REQ), ("Infinity", False, REQ),
                                             (7.5, False, REQ), (-1.0, True, REQ), (-1.0, True, SPAN_REQ)],
                         ids=["nan", "-inf", "inf", "positive", "short", "short-span"])
def test_impossible_log_probabilities_are_malformed_retried_and_never_cached(tmp_path, value, short, req):
    with Scripted(lambda h: _echo(h, value, short)) as server:
        scorer = _scorer(server, tmp_path)
        [out] = scorer.score_many([req])
        assert isinstance(out, LLMInfrastructureError) and out.kind == "malformed", out
        assert server.requests == 3                 # retried like any malformed answer
    assert scorer.cache.get(scorer.key(req)) is None


def test_a_sound_echo_is_scored(tmp_path):
    with Scripted(_echo) as server:
        [out] = _scorer(server, tmp_path).score_many([SPAN_REQ])
    assert out.logprobs == (-1.0,) and out.span_logprob is not None and out.span_logprob < 0


# -- 3. the scorer's cache key names the endpoint -----------------------------------------------------------------
def test_the_scorer_key_names_the_endpoint_and_the_in_process_key_the_weights_and_binding(tmp_path):
    with Scripted(lambda h: _echo(h, -1.0)) as a, Scripted(lambda h: _echo(h, -2.0)) as b:
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


# -- 4./5./9. failures of the endpoint are failures, not "cannot score" ---------------------------------------------
@pytest.mark.parametrize("respond,error,kind,requests", [
    (_status(401), LLMInfrastructureError, "auth", 1),
    (_status(403), LLMInfrastructureError, "auth", 1),
    (_status(404, "model fake-model not found"), LLMInfrastructureError, "config", 1),
    (_status(400), LLMRequestError, None, 1),
    (lambda h: _json(h, {"id": "x", "object": "text_completion"}), LLMInfrastructureError, "malformed", 3),
    (lambda h: _json(h, {"id": "x", "choices": []}), LLMInfrastructureError, "malformed", 3),
    (_status(503, "upstream overloaded"), LLMInfrastructureError, "server_error", 3),
    (lambda h: h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n"
                             b"{not json"), LLMInfrastructureError, "malformed", 3),
], ids=["401", "403", "404", "400", "nochoices", "emptychoices", "503", "badjson"])
def test_endpoint_failures_are_classified_as_the_client_does(tmp_path, respond, error, kind, requests):
    with Scripted(respond) as server:
        [out] = _scorer(server, tmp_path).score_many([REQ])
        assert type(out) is error, out
        assert kind is None or out.kind == kind
        assert server.requests == requests
        with pytest.raises(error):                  # not "use lexical"
            LLM(base_url=server.url, model=MODEL, api_key="none", max_retries=0,
                cache_path=str(tmp_path / "r.sqlite")).scores_prompts()


def test_a_chat_only_endpoint_still_cannot_score(tmp_path):
    with Scripted(_status(404, "This is a chat model and not supported in the v1/completions endpoint")) as server:
        with pytest.raises(ScoringUnsupported, match="chat model"):
            _scorer(server, tmp_path).score_many([REQ])


def test_a_scorer_error_names_the_status_and_a_redacted_excerpt(tmp_path):
    with Scripted(_status(500, "boom " + "z" * 3000 + KEY)) as server:
        [out] = _scorer(server, tmp_path, retries=0).score_many([REQ])
    assert "500" in str(out) and "boom" in str(out) and len(str(out)) < 2500
    assert KEY[:10] not in str(out)


# -- 6. slow headers are under the total deadline: tests/core/test_hardening_llm.py (with a trickled body)


# -- 7. the size cap counts the decoded body ---------------------------------------------------------------------
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

    with Scripted(respond) as server:
        client = LLMClient(server.url, MODEL, max_retries=3, backoff_s=0.01, max_response_bytes=2 << 20)
        assert client.chat(MSGS).text == "Pablo Escobar"     # a small compressed answer still reads
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat([{"role": "user", "content": "bomb"}])
        assert e.value.kind == "too_large" and server.requests == 2
    assert seen == ["identity", "identity"]


# -- 8. a message is redacted before it is cut -------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    {"error": {"message": "x" * 270 + " token=" + KEY + " rejected"}},
    chat_completion("Error: upstream rejected " + "y" * 160 + " key=" + KEY),
], ids=["error-object", "error-text"])
def test_a_key_across_the_cut_of_an_error_message_leaves_no_prefix(tmp_path, caplog, body):
    caplog.set_level(logging.DEBUG)
    with Scripted(lambda h: _json(h, body)) as server:
        client = LLMClient(server.url, MODEL, api_key=KEY, cache=CallCache(tmp_path / "c.sqlite"), max_retries=1,
                           backoff_s=0.01)
        with pytest.raises(LLMInfrastructureError) as e:
            client.chat(MSGS)
    assert e.value.kind == "error_text" and "=***REDACT" in str(e.value)     # masked, then cut
    prefix = KEY[:10]
    assert prefix not in str(e.value) and prefix not in caplog.text
    assert prefix.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())   # the cache and its WAL
