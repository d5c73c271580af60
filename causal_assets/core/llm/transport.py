"""The `openai` SDK and the HTTP transport `LLMClient` plugs into it, in a module of their own: importing openai takes
~0.7 s, which every process loading the code location (each Dagster step and run worker, `dagster dev`) would pay
although only steps that call an endpoint use it. `client.py` and `scoring.py` load it when they first need it."""
from __future__ import annotations

import importlib
import time

import openai

from .errors import ResponseTooLarge

__all__ = ["GuardedTransport", "httpx", "openai_client"]


def _openai_httpx():
    """The httpx module the installed openai SDK is built on (`httpx`, or the `httpx2` fork in recent SDKs): the
    transport below must be of the same library as the client it is plugged into."""
    for klass in getattr(openai, "DefaultHttpxClient", object).__mro__[1:]:
        root = klass.__module__.split(".")[0]
        if root in ("httpx", "httpx2"):
            return importlib.import_module(root)
    return importlib.import_module("httpx")


httpx = _openai_httpx()


class GuardedStream(httpx.SyncByteStream):
    """A response body read under a total deadline and a size cap (httpx's read timeout restarts with every
    byte, so a trickling endpoint would otherwise hold a call for as long as it likes)."""

    def __init__(self, inner, deadline: float, total_s: float, max_bytes: int, request: httpx.Request):
        self._inner, self._deadline, self._total_s = inner, deadline, total_s
        self._max_bytes, self._request = max_bytes, request

    def __iter__(self):
        n = 0
        for chunk in self._inner:
            n += len(chunk)
            if n > self._max_bytes:
                raise ResponseTooLarge(f"response body larger than {self._max_bytes} bytes")
            if time.monotonic() > self._deadline:
                raise httpx.ReadTimeout(f"response not complete within the total deadline of {self._total_s}s",
                                        request=self._request)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class GuardedTransport(httpx.BaseTransport):
    def __init__(self, total_s: float, max_bytes: int):
        self._inner = httpx.HTTPTransport()
        self._total_s, self._max_bytes = total_s, max_bytes

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self._total_s
        response = self._inner.handle_request(request)
        length = response.headers.get("content-length")
        if length and length.isdigit() and int(length) > self._max_bytes:
            response.close()
            raise ResponseTooLarge(f"response body of {int(length)} bytes (Content-Length) is larger than "
                                   f"{self._max_bytes} bytes")
        if time.monotonic() > deadline:
            response.close()
            raise httpx.ReadTimeout(f"no response within the total deadline of {self._total_s}s", request=request)
        response.stream = GuardedStream(response.stream, deadline, self._total_s, self._max_bytes, request)
        return response

    def close(self) -> None:
        self._inner.close()


def openai_client(base_url: str | None, api_key: str, timeout_s: float, max_response_bytes: int) -> openai.OpenAI:
    """An `openai.OpenAI` client without the SDK's own retries (the caller's retry loop makes every attempt visible
    and bounded), each response under a total deadline and a size cap."""
    transport = GuardedTransport(timeout_s, max_response_bytes)
    return openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0,
                         http_client=openai.DefaultHttpxClient(transport=transport, timeout=timeout_s))
