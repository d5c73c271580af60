"""Exceptions of the LLM layer. Kept apart from model outcomes: an `LLMInfrastructureError` means the
endpoint failed (timeouts, connection errors, 429, 5xx, malformed/empty responses after all retries) and
must never be recorded as a solver's wrong answer."""
from __future__ import annotations


class LLMError(Exception):
    """Base class of every error raised by `causal_assets.core.llm`."""


class LLMInfrastructureError(LLMError):
    """The endpoint could not produce a valid response (after retries where retrying makes sense)."""

    def __init__(self, message: str, *, attempts: int = 0, kind: str = "unknown", gave_up: bool = False):
        super().__init__(message)
        self.attempts = attempts
        # timeout | connection | rate_limit | server_error | malformed | error_text | too_large | auth | config |
        # refused | local_server_died | outage (the labelling loop: batches in a row failed) | unknown
        self.kind = kind
        # the endpoint had failed every attempt for the client's whole `give_up_after_s`: retrying is over
        self.gave_up = gave_up

    @property
    def transient(self) -> bool:
        """Whether the same call may succeed later (a bad key, a wrong URL or model, an oversize answer: no)."""
        return self.kind not in PERMANENT_KINDS

    @property
    def final(self) -> bool:
        """Whether nothing more should be asked of this endpoint in this step: it refuses every request (a bad
        key, a wrong URL or model), or it failed every attempt for the client's whole give-up bound. Batches stop
        at such an error (the next request would meet the same), and steps are not retried for it."""
        return self.kind in ENDPOINT_WIDE_KINDS or self.gave_up


PERMANENT_KINDS = frozenset({"auth", "config", "too_large", "refused"})
# permanent for every request to the endpoint, not only for the one that met it
ENDPOINT_WIDE_KINDS = frozenset({"auth", "config"})


class LLMRequestError(LLMError):
    """The endpoint rejected the request itself (HTTP 400/422: e.g. context too long, bad parameter).
    Not retried: the same request would fail again."""


class BudgetExceeded(LLMError):
    """The per-run `CallBudget` forbids another uncached call. Completed calls are already in the cache."""


class LocalServerError(LLMError):
    """The local llama.cpp server could not be started (missing model/extra, early exit, startup timeout)."""


class ResponseTooLarge(Exception):
    """The response body exceeds the client's `max_response_bytes` (raised by its transport, classified by
    `LLMClient` as kind "too_large": not retried, not cached)."""
