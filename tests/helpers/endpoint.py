"""A real HTTP server on 127.0.0.1 standing in for an OpenAI-compatible endpoint: the one fake endpoint of the
tests. Each test gives it a `respond(handler)` that writes the answer it needs (a completion, a status, bad JSON,
a trickle, a held request); the server parses the request body, records every request and counts those in flight.

    with FakeEndpoint(lambda h: send_json(h, chat_completion("Paris"))) as server:
        LLMClient(server.url, MODEL).chat(...)

`closed_port_url()` is the address of a port nothing listens on (connection refused).
"""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

MODEL = "fake-model"


def chat_completion(content: str, prompt_tokens: int = 5, completion_tokens: int = 2, model: str = MODEL) -> dict:
    """A chat completion answering `content`."""
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def send_json(h: BaseHTTPRequestHandler, payload, status: int = 200, headers: dict | None = None) -> None:
    """Answer `payload` (an object, or bytes sent as they are) with `status` and Content-Length."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(data)


def status(code: int, message: str = "fake") -> Callable[[BaseHTTPRequestHandler], None]:
    """A `respond` answering every request with HTTP `code` and an OpenAI-style error body."""
    return lambda h: send_json(h, {"error": {"message": message, "type": "x"}}, code)


class FakeEndpoint:
    """A threading HTTP server on 127.0.0.1 whose every GET and POST is answered by `respond(handler)`; the handler
    carries `body` (the request's JSON, {} when none or not JSON). `requests` lists each request's method, path,
    Authorization header and body; `inflight` / `max_inflight` count the requests being answered at once. A client
    that went away (a timeout, a killed process) is not an error of the server."""

    def __init__(self, respond: Callable[[BaseHTTPRequestHandler], None]):
        self.respond = respond
        self.requests: list[dict] = []
        self.inflight = 0
        self.max_inflight = 0
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    self.body = json.loads(raw) if raw else {}
                except ValueError:
                    self.body = {}
                with endpoint._lock:
                    endpoint.requests.append({"method": self.command, "path": self.path, "t": time.monotonic(),
                                              "auth": self.headers.get("Authorization"), "body": self.body})
                    endpoint.inflight += 1
                    endpoint.max_inflight = max(endpoint.max_inflight, endpoint.inflight)
                try:
                    endpoint.respond(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with endpoint._lock:
                        endpoint.inflight -= 1

            do_GET = do_POST

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port_url() -> str:
    """The URL of a port on 127.0.0.1 that nothing listens on (bound once, then closed): connection refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


class FakeOpenAI(FakeEndpoint):
    """An endpoint of scripted behaviours, consumed one per request from `script`, then `default`:
    "ok" | "429" | "500" | "badjson" | "nochoices" | "echo_auth_500" | ("sleep", s) | "block". "ok" answers a chat
    with `echo: <last user message>`, and a completion with its prompt echoed with log-probabilities."""

    def __init__(self, script=(), default="ok", delay_s: float = 0.0):
        self.script = list(script)
        self.default = default
        self.delay_s = delay_s
        self.blocked = threading.Event()
        self.release = threading.Event()
        super().__init__(self._respond)

    def _respond(self, h: BaseHTTPRequestHandler) -> None:
        with self._lock:
            behaviour = self.script.pop(0) if self.script else self.default
        body = h.body
        if self.delay_s:
            time.sleep(self.delay_s)
        if isinstance(behaviour, tuple) and behaviour[0] == "sleep":
            time.sleep(behaviour[1])
            behaviour = "ok"
        if behaviour == "block":
            self.blocked.set()
            self.release.wait(30)
            behaviour = "ok"
        if behaviour == "ok" and h.path.endswith("/completions") and "prompt" in body:
            send_json(h, {"id": "cmpl-fake", "object": "text_completion", "created": 1700000000,
                          "model": MODEL, "choices": [{"index": 0, "text": body["prompt"] + " yes",
                          "finish_reason": "length", "logprobs": {
                              "tokens": ["a", " yes"], "token_logprobs": [None, -0.5],
                              "top_logprobs": [None, {" yes": -0.5}], "text_offset": [0, 1]}}],
                          "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        elif behaviour == "ok":
            user = [m["content"] for m in body.get("messages", []) if m.get("role") == "user"]
            send_json(h, chat_completion(f"echo: {user[-1] if user else ''}"))
        elif behaviour == "429":
            send_json(h, {"error": {"message": "rate limited", "type": "rate_limit"}}, 429, {"Retry-After": "0"})
        elif behaviour == "500":
            send_json(h, {"error": {"message": "internal boom", "type": "server_error"}}, 500)
        elif behaviour == "echo_auth_500":  # a careless server that reflects the credentials
            send_json(h, {"error": {"message": f"bad header {h.headers.get('Authorization')}"}}, 500)
        elif behaviour == "badjson":
            send_json(h, b'{"id": "x", "choices": [ oops')
        elif behaviour == "nochoices":
            send_json(h, {**chat_completion("x"), "choices": []})
        else:  # pragma: no cover
            raise AssertionError(behaviour)

    def close(self) -> None:
        self.release.set()
        super().close()


def chat_only() -> FakeEndpoint:
    """An endpoint that, like hosted chat-only APIs, has no completions endpoint (so no prompt log-probabilities)."""
    return FakeEndpoint(status(404, "This is a chat model and not supported in the v1/completions endpoint"))
