"""How an endpoint is failing, in words, and for how long in a row: what bounds the time a dead endpoint costs.

`describe(exc, kind, timeout_s)` names what failed in the terms a user acts on (connection refused, HTTP 401, HTTP
500, a malformed response, no answer in time). `FailureStreak` counts the seconds since the first of the endpoint
attempts that have failed in a row (any success ends the streak): once it reaches `give_up_after_s`, `LLMClient`
stops retrying and every call fails at once, so an endpoint that answers nothing but 500s, or a closed port, ends a
step within that bound plus one attempt's `timeout_s`, not after every call of every question has run its retries.
It also says, now and then, what is being retried (`notify`: the command's terminal), so a failing endpoint is
never silent. See docs/operations.md ("Retries and limits").
"""
from __future__ import annotations

import re
import threading
import time
from typing import Callable


# What a status means for the user, beside its number.
STATUS_MEANING = {401: "authentication refused: check the API key", 403: "forbidden: check the API key",
                  404: "not found: check the URL and the model name", 408: "request timeout", 409: "conflict",
                  425: "too early", 429: "rate limited"}
_ERRNO = re.compile(r"\[Errno -?\d+\]\s*(.+)")


def _causes(exc: BaseException):
    seen = 0
    while exc is not None and seen < 10:
        yield exc
        exc = exc.__cause__ or exc.__context__
        seen += 1


def describe(exc: BaseException, kind: str, timeout_s: float | None = None) -> str:
    """What failed, in a few words: `connection refused`, `HTTP 401 (authentication refused: check the API key)`,
    `HTTP 500 (server error)`, `malformed response`, ... (never the request or its headers)."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        meaning = STATUS_MEANING.get(status, "server error" if status >= 500 else "request refused")
        return f"HTTP {status} ({meaning})"
    if kind == "connection":
        for cause in _causes(exc):
            m = _ERRNO.search(str(cause))
            if m:
                reason = m.group(1).strip().rstrip(".")
                return reason[0].lower() + reason[1:] if reason else "connection error"
        return "cannot connect"
    if kind == "timeout":
        return f"no complete answer within {timeout_s:g} s" if timeout_s else "timed out"
    if kind in ("malformed", "error_text", "too_large"):
        return {"malformed": "malformed response", "error_text": "an error message in a 200 answer",
                "too_large": "response too large"}[kind]
    return kind.replace("_", " ")


class FailureStreak:
    """The endpoint attempts that failed in a row (thread-safe): since when, how many, the last one in words, and a
    throttled `notify` of what is being retried."""

    def __init__(self, give_up_after_s: float, notify: Callable[[str], None] | None = None,
                 every_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        if not give_up_after_s >= 0:
            raise ValueError(f"give_up_after_s must be a number of seconds (0 or more), got {give_up_after_s!r}")
        self.give_up_after_s, self.notify, self.every_s, self.clock = give_up_after_s, notify, every_s, clock
        self.since: float | None = None
        self.attempts = 0
        self.last = ""
        self._said = -1e18
        self._lock = threading.Lock()

    def failed(self, what: str) -> float:
        """Record a failed attempt (`what`: `describe`'s words); the seconds the streak has lasted."""
        with self._lock:
            now = self.clock()
            if self.since is None:
                self.since = now
            self.attempts += 1
            self.last = what
            return now - self.since

    def succeeded(self) -> None:
        with self._lock:
            self.since, self.attempts, self.last = None, 0, ""

    def seconds(self) -> float:
        with self._lock:
            return 0.0 if self.since is None else self.clock() - self.since

    def over(self) -> bool:
        """Whether the endpoint has failed for the whole bound: no more retries, each call one attempt."""
        return self.since is not None and self.seconds() >= self.give_up_after_s

    def left_s(self) -> float:
        """Seconds of the bound left (the whole bound when nothing is failing)."""
        return max(0.0, self.give_up_after_s - self.seconds())

    def say(self, line: str, force: bool = False) -> None:
        """`line` to `notify`, at most once every `every_s` seconds (the first at once)."""
        if self.notify is None:
            return
        with self._lock:
            now = self.clock()
            if not force and now - self._said < self.every_s:
                return
            self._said = now
        try:
            self.notify(line)
        except Exception:  # noqa: BLE001 - a closed terminal must not fail the call
            pass
