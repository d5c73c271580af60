"""The `openai` SDK and the HTTP transport `LLMClient` plugs into it, in a module of their own: importing openai takes
~0.7 s, which every process loading the code location (each Dagster step and run worker, `dagster dev`) would pay
although only steps that call an endpoint use it. `client.py` and `scoring.py` load it when they first need it."""
from __future__ import annotations

import importlib
import socket
import threading
import time
import zlib

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


# Decoders of the encodings the size cap can follow (what the cap counts is the body httpx hands the SDK): zlib's
# 32 + 15 window bits read a gzip or a zlib header.
_COUNTED_ENCODINGS = frozenset({"gzip", "x-gzip", "deflate"})
_DECODE_STEP = 1 << 16


class GuardedStream(httpx.SyncByteStream):
    """A response body read under a total deadline and a size cap (httpx's read timeout restarts with every
    byte, so a trickling endpoint would otherwise hold a call for as long as it likes). The cap counts the
    decoded body: a few KB of gzip can inflate to gigabytes."""

    def __init__(self, inner, deadline: float, total_s: float, max_bytes: int, request: httpx.Request,
                 encoding: str | None = None, watchdog: threading.Timer | None = None):
        self._inner, self._deadline, self._total_s = inner, deadline, total_s
        self._max_bytes, self._request, self._watchdog = max_bytes, request, watchdog
        self._decoder = zlib.decompressobj(32 + zlib.MAX_WBITS) if encoding else None

    def _decoded_len(self, chunk: bytes) -> int:
        n, data = 0, chunk
        while data:   # bounded steps, so a bomb never inflates in memory here
            try:
                n += len(self._decoder.decompress(data, _DECODE_STEP))
            except zlib.error as exc:
                raise httpx.DecodingError(f"undecodable response body: {exc}", request=self._request) from None
            data = self._decoder.unconsumed_tail
            if n > self._max_bytes:
                break
        return n

    def __iter__(self):
        n = 0
        try:
            for chunk in self._inner:
                n += self._decoded_len(chunk) if self._decoder else len(chunk)
                if n > self._max_bytes:
                    raise ResponseTooLarge(f"response body larger than {self._max_bytes} bytes"
                                           f"{' (decoded)' if self._decoder else ''}")
                if time.monotonic() > self._deadline:
                    raise httpx.ReadTimeout(f"response not complete within the total deadline of {self._total_s}s",
                                            request=self._request)
                yield chunk
        except httpx.TransportError:
            if time.monotonic() > self._deadline:   # the watchdog cut the connection
                raise httpx.ReadTimeout(f"response not complete within the total deadline of {self._total_s}s",
                                        request=self._request) from None
            raise

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._inner.close()


def _cut(streams: list) -> None:
    """The watchdog: shut the attempt's connection down, which wakes a read blocked on it (headers or body)."""
    for stream in streams:
        sock = stream.get_extra_info("socket") if stream is not None else None
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class GuardedTransport(httpx.BaseTransport):
    """Each request under a total deadline (`total_s`, from sending it to the body's last byte) and a size cap.
    httpx's timeouts are per read, so an endpoint trickling its headers or body a byte at a time would never
    trip them: a watchdog shuts the connection down at the deadline. It needs the request's own socket, so
    connections are not kept alive (one connection per call, negligible beside an LLM call)."""

    def __init__(self, total_s: float, max_bytes: int):
        self._inner = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
        self._total_s, self._max_bytes = total_s, max_bytes

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self._total_s
        streams: list = []
        outer_trace = request.extensions.get("trace")

        def trace(name: str, info: dict) -> None:
            if name.endswith((".connect_tcp.complete", ".start_tls.complete", ".connect_unix_socket.complete")):
                streams.append(info.get("return_value"))
            if outer_trace is not None:
                outer_trace(name, info)

        request.extensions = {**request.extensions, "trace": trace}
        # a body we could not count before httpx decodes it would escape the cap: ask for none
        request.headers["Accept-Encoding"] = "identity"
        watchdog = threading.Timer(self._total_s, _cut, (streams,))
        watchdog.daemon = True
        watchdog.start()
        try:
            response = self._inner.handle_request(request)
        except httpx.TransportError:
            watchdog.cancel()
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"no response within the total deadline of {self._total_s}s",
                                        request=request) from None
            raise
        except BaseException:
            watchdog.cancel()
            raise
        try:
            length = response.headers.get("content-length")
            encodings = [e.strip().lower() for e in response.headers.get("content-encoding", "").split(",")]
            encodings = [e for e in encodings if e and e != "identity"]
            if length and length.isdigit() and int(length) > self._max_bytes:
                raise ResponseTooLarge(f"response body of {int(length)} bytes (Content-Length) is larger than "
                                       f"{self._max_bytes} bytes")
            if len(encodings) > 1 or (encodings and encodings[0] not in _COUNTED_ENCODINGS):
                raise httpx.DecodingError(f"response in Content-Encoding {', '.join(encodings)!r}, not requested "
                                          "and not countable against the size cap", request=request)
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"no response within the total deadline of {self._total_s}s",
                                        request=request)
        except BaseException:
            watchdog.cancel()
            response.close()
            raise
        response.stream = GuardedStream(response.stream, deadline, self._total_s, self._max_bytes, request,
                                        encodings[0] if encodings else None, watchdog)
        return response

    def close(self) -> None:
        self._inner.close()


def openai_client(base_url: str | None, api_key: str, timeout_s: float, max_response_bytes: int) -> openai.OpenAI:
    """An `openai.OpenAI` client without the SDK's own retries (the caller's retry loop makes every attempt visible
    and bounded), each response under a total deadline and a size cap."""
    transport = GuardedTransport(timeout_s, max_response_bytes)
    return openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0,
                         http_client=openai.DefaultHttpxClient(transport=transport, timeout=timeout_s))
