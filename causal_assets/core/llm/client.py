"""`LLMClient`: every call goes through the official `openai.OpenAI` client (so OpenAI, vLLM, Ollama or the local
llama.cpp server differ only by `base_url`/`model`/`api_key`), through a `CallCache`, under a `CallBudget`, with
retries for infrastructure failures.

An infrastructure failure (timeouts, 429, 5xx, malformed or oversized responses, an error text in a 2xx answer, a
dead local server) raises `LLMInfrastructureError` once retries are exhausted, or at once where retrying cannot help;
an invalid request raises `LLMRequestError`; a filtered completion is an error of kind "refused". None is ever
returned or cached as an answer, so an outage is never mistaken for a solver's wrong answer. `timeout_s` is a total
deadline per attempt; attempts failing in a row for `give_up_after_s` end the retrying (`health.py`). The cache key
names the endpoint (`cache_endpoint`); the API key is never logged, stored or shown. The full contract:
docs/operations.md ("Retries and limits").
"""
from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from causal_assets.core.foundation.progress import tell
from causal_assets.core.foundation.urls import has_credentials, without_credentials

from .cache import CallCache, CachedCall, make_key
from .errors import BudgetExceeded, LLMError, LLMInfrastructureError, LLMRequestError, ResponseTooLarge
from .health import FailureStreak, describe
from .redact import REDACTED, Secret, redact

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
NO_KEY = "no-key-required"
# What proxies and servers put into a 200 completion when they fail: short texts opening with an error word.
ERROR_TEXT = re.compile(
    r"^\s*(?:error|exception|internal server error|service unavailable|bad gateway|gateway time-?out|"
    r"upstream (?:error|model|connect\w*|request)|rate limit(?:ed)?|too many requests|model (?:is )?overloaded|"
    r"server (?:is )?overloaded)\b\s*[:\-.!]", re.IGNORECASE)
MAX_ERROR_TEXT_CHARS = 500
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
# Seconds of endpoint attempts failing in a row after which retrying stops (core/llm/health.py).
DEFAULT_GIVE_UP_AFTER_S = 60.0
_FROM_BASE_URL = object()



@dataclass(frozen=True)
class LLMResult:
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float          # wall time spent on the endpoint for THIS call; 0.0 when served from cache
    cached: bool
    logprobs: Any = None      # choices[0].logprobs as plain JSON (chat: {"content": [...]}, completion: tokens...)
    finish_reason: str | None = None
    key: str | None = None
    model: str | None = None
    attempts: int = 0         # endpoint attempts made for this call (0 when cached)

    @property
    def total_tokens(self) -> int:
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)


class CallBudget:
    """Per-run limits on uncached calls and on tokens (prompt + completion) they consume. Checked before
    each uncached call; cache hits are free. Thread-safe."""

    def __init__(self, max_calls: int | None = None, max_tokens: int | None = None):
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.calls = 0
        self.tokens = 0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                raise BudgetExceeded(f"call budget exhausted: {self.calls}/{self.max_calls} uncached calls made")
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                raise BudgetExceeded(f"token budget exhausted: {self.tokens}/{self.max_tokens} tokens used")
            self.calls += 1

    def record(self, tokens: int) -> None:
        with self._lock:
            self.tokens += int(tokens or 0)

    def __repr__(self) -> str:
        return (f"CallBudget(calls={self.calls}/{self.max_calls}, tokens={self.tokens}/{self.max_tokens})")


class MalformedResponse(Exception):
    """The endpoint answered 2xx but the body is not a usable completion."""


@dataclass(frozen=True)
class CheckedResponse:
    """A 2xx answer that passed `LLMClient.check_response`: its body and first choice as plain JSON and its text,
    the key masked in all three."""

    data: dict
    text: str
    choice: dict


class _ErrorText(Exception):
    """The endpoint answered 2xx with an error message in place of a completion."""


class _Refused(Exception):
    """The endpoint answered 2xx but refused or filtered the completion (finish_reason "content_filter")."""


def classify(exc: BaseException) -> tuple[str, bool, float | None]:
    """(kind, retryable, retry_after_s) of an exception raised by one attempt at an endpoint call (shared by
    `LLMClient` and the endpoint scorer)."""
    import openai  # loaded by the client's transport already

    if _caused_by(exc, ResponseTooLarge):
        return "too_large", False, None
    if isinstance(exc, _ErrorText):
        return "error_text", True, None
    if isinstance(exc, _Refused):
        return "refused", False, None
    if isinstance(exc, openai.APITimeoutError):
        return "timeout", True, None
    if isinstance(exc, openai.APIConnectionError):
        return "connection", True, None
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        retry_after = None
        try:
            ra = exc.response.headers.get("retry-after")
            retry_after = float(ra) if ra is not None else None
        except (TypeError, ValueError, AttributeError):
            pass
        if code == 429:
            return "rate_limit", True, retry_after
        if code >= 500:
            return "server_error", True, retry_after
        if code in RETRYABLE_STATUS:
            return f"http_{code}", True, retry_after
        if code in (401, 403):
            return "auth", False, None
        if code == 404:
            return "config", False, None
        return "request", False, None
    if isinstance(exc, (MalformedResponse, openai.APIResponseValidationError, json.JSONDecodeError)):
        return "malformed", True, None  # 2xx with a body that is not JSON / not a completion
    if isinstance(exc, ValueError) and type(exc).__module__.startswith(("pydantic", "json")):
        return "malformed", True, None
    if isinstance(exc, openai.OpenAIError):
        return "unknown", True, None
    return "unknown", False, None


def _is_sdk_error(exc: BaseException) -> bool:
    import openai  # loaded by the client's transport already

    return isinstance(exc, openai.OpenAIError)


def _caused_by(exc: BaseException, kind: type) -> bool:
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, kind):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


@dataclass
class _KeyLock:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


class LLMClient:
    def __init__(self, base_url: str | None, model: str, api_key: str | None = None,
                 cache: CallCache | None = None, timeout_s: float = 60, max_retries: int = 4,
                 backoff_s: float = 0.5, max_concurrency: int = 2, *, budget: CallBudget | None = None,
                 max_backoff_s: float = 30.0, max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 cache_endpoint: str | None | object = _FROM_BASE_URL, error_text: re.Pattern | None = ERROR_TEXT,
                 server_failure: Callable[[], str | None] | None = None,
                 give_up_after_s: float = DEFAULT_GIVE_UP_AFTER_S, notify: Callable[[str], None] | None = tell):
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if base_url and has_credentials(base_url):
            # the SDK would send them as Basic auth in place of the key, and the URL names the endpoint in the
            # call cache, logs and reprs
            raise ValueError(f"LLM base URL {without_credentials(base_url)} carries credentials: give the key as "
                             "the API key (CAUSAL_ASSETS_LLM_API_KEY) and the URL without them")
        self.base_url = base_url
        self.model = model
        self.cache = cache
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_concurrency = max_concurrency
        self.budget = budget
        self.max_response_bytes = max_response_bytes
        self.error_text = error_text
        # a local server's `failure()`: once it names a dead server, retrying against its port is pointless
        self.server_failure = server_failure
        self.cache_endpoint = base_url if cache_endpoint is _FROM_BASE_URL else cache_endpoint
        # attempts failing in a row, across calls and threads: retrying stops once they have for give_up_after_s
        self.failures = FailureStreak(give_up_after_s, notify)
        self._api_key = Secret(api_key or NO_KEY)  # the caller passes the key (resources: EnvVar of settings)
        # the openai SDK (~0.7 s to import) is loaded here, by the first client, not by every process that loads
        # the code location
        from .transport import openai_client

        # our own retry loop replaces the SDK's (max_retries=0) so every attempt is visible and bounded
        self._client = openai_client(base_url, self._api_key.get(), timeout_s, max_response_bytes)
        self._sem = threading.BoundedSemaphore(max_concurrency)
        self._key_locks: dict[str, _KeyLock] = {}
        self._key_locks_guard = threading.Lock()
        self._rng = random.Random()
        self._rng_lock = threading.Lock()

    # -- public API ---------------------------------------------------------------------------------
    def chat(self, messages: Sequence[dict], *, sample_index: int | None = None, use_cache: bool = True,
             **params: Any) -> LLMResult:
        """One chat completion. `params` go to `chat.completions.create` (temperature, max_tokens, seed,
        logprobs, top_logprobs, stop, ...) and into the cache key. `sample_index` only enters the key:
        use it to draw several independent samples of the same request at temperature > 0.
        `use_cache=False` skips the lookup (the call is still journalled)."""
        messages = [dict(m) for m in messages]
        return self._call("chat", messages, params, sample_index, use_cache)

    def completion(self, prompt: str, *, sample_index: int | None = None, use_cache: bool = True,
                   **params: Any) -> LLMResult:
        """One text completion (`completions.create`), e.g. `echo=True, logprobs=1, max_tokens=0` for
        prompt-token log-probabilities."""
        return self._call("completion", prompt, params, sample_index, use_cache)

    def chat_many(self, list_of_messages: Iterable[Sequence[dict]], *, return_exceptions: bool = False,
                  **params: Any) -> list[LLMResult | BaseException]:
        """`chat` over many conversations on a pool of `max_concurrency` threads; results in input order.
        With `return_exceptions=True` failures are returned in place instead of raised (first one raised
        otherwise; the calls that completed are in the cache either way), except a final one (a bad key, URL or
        model, or an endpoint past its give-up bound: `LLMInfrastructureError.final`), which every other call
        would meet too: it is raised."""
        items = list(list_of_messages)
        final: list[LLMError] = []   # once one is met, the calls not yet started are not made

        def one(msgs):
            if final:
                raise final[0]
            try:
                return self.chat(msgs, **params)
            except LLMError as e:
                if isinstance(e, LLMInfrastructureError) and e.final:
                    final.append(e)
                elif return_exceptions:
                    return e
                raise

        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(items)),
                                thread_name_prefix="llm") as pool:
            return list(pool.map(one, items))

    @property
    def openai_client(self) -> openai.OpenAI:
        """The underlying `openai` client (same endpoint and key), for calls this class does not wrap, such as
        prompt log-probability scoring (which has its own cache keys and retries)."""
        return self._client

    def key_for(self, kind: str, payload: Any, sample_index: int | None = None, **params: Any) -> str:
        return make_key(self.model, kind, payload, self._key_params(params, sample_index),
                        endpoint=self.cache_endpoint)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "LLMClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"LLMClient(base_url={self.base_url!r}, model={self.model!r}, api_key='***', "
                f"cache={self.cache!r}, budget={self.budget!r})")

    def __reduce__(self):
        raise TypeError("LLMClient cannot be pickled (it holds an API key); build one per process")

    # -- internals ----------------------------------------------------------------------------------
    def redact_secrets(self, text: object) -> str:
        """`text` with the configured key (and the patterns `redact` knows) masked: before any cut of it."""
        return redact(text, self._api_key.get() if self._api_key.get() != NO_KEY else None)

    @staticmethod
    def _key_params(params: dict, sample_index: int | None) -> dict:
        p = dict(params)
        if sample_index is not None:
            p["__sample_index"] = sample_index
        return p

    def _key_lock(self, key: str) -> _KeyLock:
        with self._key_locks_guard:
            kl = self._key_locks.setdefault(key, _KeyLock())
            kl.users += 1
            return kl

    def _release_key_lock(self, key: str, kl: _KeyLock) -> None:
        with self._key_locks_guard:
            kl.users -= 1
            if kl.users == 0:
                self._key_locks.pop(key, None)

    def _call(self, kind: str, payload: Any, params: dict, sample_index: int | None,
              use_cache: bool) -> LLMResult:
        for forbidden in ("model", "messages", "prompt", "stream"):
            if forbidden in params:
                raise TypeError(f"{forbidden!r} cannot be passed as a parameter here")
        key = self.key_for(kind, payload, sample_index, **params)
        request = {"kind": kind, "model": self.model,
                   ("messages" if kind == "chat" else "prompt"): payload,
                   "params": params, "sample_index": sample_index}
        kl = self._key_lock(key)
        try:
            with kl.lock:  # identical concurrent requests make one endpoint call
                if use_cache and self.cache is not None:
                    hit = self.cache.get(key)
                    if hit is not None:
                        log.debug("llm cache hit %s", key[:12])
                        return self._from_cache(hit)
                if self.budget is not None:
                    self.budget.acquire()
                return self._call_endpoint(kind, key, payload, params, request)
        finally:
            self._release_key_lock(key, kl)

    def _from_cache(self, row: CachedCall) -> LLMResult:
        resp = row.response or {}
        choice = (resp.get("choices") or [{}])[0]
        return LLMResult(text=row.text or "", prompt_tokens=row.prompt_tokens,
                         completion_tokens=row.completion_tokens, latency_s=0.0, cached=True,
                         logprobs=choice.get("logprobs"), finish_reason=choice.get("finish_reason"),
                         key=row.key, model=row.model, attempts=0)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """The backoff before retry `attempt + 1`: exponential with jitter, at least the server's Retry-After."""
        with self._rng_lock:
            jitter = 0.5 + self._rng.random()  # in [0.5, 1.5)
        delay = min(self.max_backoff_s, self.backoff_s * (2 ** attempt) * jitter)
        if retry_after is not None:
            delay = min(self.max_backoff_s, max(delay, retry_after))
        return delay

    def _one_attempt(self, kind: str, payload: Any, params: dict) -> tuple[dict, str, int | None,
                                                                           int | None, Any, str | None]:
        if kind == "chat":
            resp = self._client.chat.completions.create(model=self.model, messages=payload, **params)
        else:
            resp = self._client.completions.create(model=self.model, prompt=payload, **params)
        checked = self.check_response(kind, resp)
        usage = checked.data.get("usage") or {}
        return (checked.data, checked.text, usage.get("prompt_tokens"), usage.get("completion_tokens"),
                checked.choice.get("logprobs"), checked.choice.get("finish_reason"))

    def check_response(self, kind: str, resp: Any) -> "CheckedResponse":
        """The one check of a 2xx answer, for every call to the endpoint (this client's chat and completions, and
        the endpoint scorer's completions and log-probability calls): a body carrying an `error` object or, for
        chat and completions, a text that is an error message is kind "error_text" (retried); a filtered
        completion (finish_reason "content_filter") is kind "refused"; no choices or no text is malformed; and
        the configured key, wherever the endpoint echoed it, is masked in the text and the body before either is
        returned, cached or logged. ``kind``: "chat", "completion" or "score" (the echoed prompt is no answer, so
        the error-text rule does not apply to it)."""
        if resp is None or not hasattr(resp, "model_dump"):
            raise MalformedResponse(f"unexpected response type {type(resp).__name__}")
        data = resp.model_dump(mode="json")
        if data.get("error"):
            # redacted before it is cut: a key straddling the cut would leave its prefix
            raise _ErrorText(f"2xx response carrying an error: {self.redact_secrets(data['error'])[:300]}")
        choices = data.get("choices")
        if not choices or not isinstance(choices[0], dict):
            raise MalformedResponse("response has no choices")
        choice = choices[0]
        if kind == "chat":
            msg = choice.get("message")
            if not isinstance(msg, dict):
                raise MalformedResponse("response choice has no message")
            text = msg.get("content")
            if text is None and msg.get("tool_calls"):
                text = ""
        else:
            text = choice.get("text")
        if not isinstance(text, str):
            raise MalformedResponse("response choice has no text content")
        if (kind != "score" and self.error_text is not None and len(text) <= MAX_ERROR_TEXT_CHARS
                and self.error_text.match(text)):
            raise _ErrorText(f"2xx response whose text is an error message: {self.redact_secrets(text)[:200]!r}")
        if choice.get("finish_reason") == "content_filter":
            raise _Refused("the endpoint refused or filtered the completion (finish_reason 'content_filter')")
        key = self._api_key.get()
        if key and key != NO_KEY:
            raw = json.dumps(data)
            if key in raw:   # an endpoint that echoes the request's headers
                text = text.replace(key, REDACTED)
                data = json.loads(raw.replace(key, REDACTED))
                choice = data["choices"][0]
        return CheckedResponse(data, text, choice)

    @property
    def endpoint(self) -> str:
        """The endpoint's address as messages show it (never the key: a URL with credentials is refused)."""
        return self.base_url or "the default OpenAI endpoint"

    def retrying(self, label: str, attempt: Callable[[], Any],
                 on_failure: Callable[[str, int, float], None] | None = None) -> tuple[Any, int, float]:
        """`attempt()` under this client's concurrency bound and retry policy: (its result, attempts, latency of the
        successful attempt). Failures are classified by `classify`; the last one raises `LLMInfrastructureError`
        (or `LLMRequestError` for a rejected request) with a redacted message naming `label`, the endpoint and
        what failed, after `on_failure(message, attempts, total latency)` (the caller's journal). Once the
        endpoint's attempts have failed in a row for `give_up_after_s` (`self.failures`), nothing is retried any
        more: each call makes one attempt and its failure is final (`gave_up`)."""
        attempts = 0
        total_latency = 0.0
        streak = self.failures
        while True:
            attempts += 1
            t0 = time.monotonic()
            try:
                with self._sem:
                    t0 = time.monotonic()
                    result = attempt()
                streak.succeeded()
                return result, attempts, time.monotonic() - t0
            except Exception as exc:  # noqa: BLE001 - classified below; nothing escapes unredacted
                total_latency += time.monotonic() - t0
                err_kind, retryable, retry_after = classify(exc)
                last_msg = self.redact_secrets(f"{type(exc).__name__}: {exc}")[:2000]
                what = describe(exc, err_kind, self.timeout_s)
                died = self.server_failure() if self.server_failure and retryable else None
                if died:
                    err_kind, retryable, last_msg = "local_server_died", False, f"{last_msg} ({died})"
                gave_up = False
                if retryable:   # the endpoint failing, not refusing this request: part of the streak
                    failing_s = streak.failed(what)
                    gave_up = failing_s >= streak.give_up_after_s
                if retryable and not gave_up and attempts <= self.max_retries:
                    # never asleep past the bound: the attempt after the sleep is the last one
                    delay = min(self._backoff(attempts - 1, retry_after), streak.left_s())
                    log.warning("llm %s attempt %d/%d failed (%s): %s; retrying in %.2fs", label, attempts,
                                self.max_retries + 1, err_kind, last_msg, delay)
                    streak.say(f"LLM endpoint {self.endpoint}: {what} on the {label} (attempt {attempts} of "
                               f"{self.max_retries + 1}); retrying in {delay:.1f} s. Failing for {failing_s:.0f} s "
                               f"in a row; giving up after {streak.give_up_after_s:g} s")
                    time.sleep(delay)
                    continue
                if gave_up:
                    msg = (f"the LLM endpoint {self.endpoint} failed every attempt for {failing_s:.0f} s in a row "
                           f"({streak.attempts} attempts; the last, of a {label}: {what}: {last_msg}); gave up "
                           f"after {streak.give_up_after_s:g} s")
                else:
                    msg = f"{label} at {self.endpoint} failed after {attempts} attempt(s) [{err_kind}]: {what}: " \
                          f"{last_msg}"
                if on_failure is not None:
                    on_failure(msg, attempts, total_latency)
                log.error("llm %s", msg)
                if err_kind == "request":
                    raise LLMRequestError(msg) from None
                if err_kind == "unknown" and not _is_sdk_error(exc):
                    # a bug on our side, not the endpoint's: surface it (redacted) as what it is
                    raise LLMError(msg) from None
                # `from None`: the SDK exception holds the request (and its Authorization header)
                raise LLMInfrastructureError(msg, attempts=attempts, kind=err_kind, gave_up=gave_up) from None

    def _call_endpoint(self, kind: str, key: str, payload: Any, params: dict, request: dict) -> LLMResult:
        def journal(msg: str, attempts: int, total_latency: float) -> None:
            if self.cache is not None:
                self.cache.put(key, self.model, request, None, None, None, None, total_latency,
                               status="error", error=msg, attempts=attempts)

        (data, text, pt, ct, logprobs, finish), attempts, latency = self.retrying(
            f"{kind} call to model {self.model!r}", lambda: self._one_attempt(kind, payload, params), journal)
        if self.cache is not None:
            self.cache.put(key, self.model, request, data, text, pt, ct, latency, status="ok", attempts=attempts)
        if self.budget is not None:
            self.budget.record((pt or 0) + (ct or 0))
        log.debug("llm %s %s ok in %.3fs (%s attempt(s))", kind, key[:12], latency, attempts)
        return LLMResult(text=text, prompt_tokens=pt, completion_tokens=ct, latency_s=latency,
                         cached=False, logprobs=logprobs, finish_reason=finish, key=key,
                         model=self.model, attempts=attempts)
