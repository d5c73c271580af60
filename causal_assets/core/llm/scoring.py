"""Teacher-forced log-probabilities of given continuations (the gold answer) after a prompt: the graded outcome
of a Monte Carlo trial. No decoding: one prompt evaluation per request.

Two backends behind `score_many(requests) -> [ScoreResult | LLMError]`: :class:`LlamaCppScorer`, in-process
llama.cpp on a local GGUF (logits only for the rows that predict a continuation token, and the previous prompt's KV
cache reused in whole blocks of ``reuse_block`` tokens, so requests sharing a beginning pay for their tails and a
result never depends on the request before it), and :class:`EndpointScorer`, an OpenAI-compatible
``/v1/completions`` endpoint (``prompt_logprobs`` or ``echo`` + ``logprobs``; one that offers neither raises
:class:`ScoringUnsupported`). Every request goes through the :class:`~causal_assets.core.llm.cache.CallCache`;
infrastructure errors are journalled, never outcomes. See docs/pipeline.md ("Scoring backends").
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from .cache import CallCache, file_sha256, make_key
from .client import LLMClient
from .cores import CoreMeter
from .errors import LLMError, LLMInfrastructureError
from .logits import log_softmax_at
from .response_logprobs import UNSUPPORTED, from_echo, from_prompt_logprobs

__all__ = ["ScoreRequest", "ScoreResult", "Scorer", "LlamaCppScorer", "EndpointScorer", "ScoringUnsupported",
           "prefix_order"]


class ScoringUnsupported(LLMError):
    """The endpoint cannot return prompt log-probabilities."""


@dataclass(frozen=True)
class ScoreRequest:
    prompt: str
    continuations: tuple[str, ...]   # e.g. the gold answer and its accepted aliases, each with a leading space
    # characters [start, end) of the prompt whose own log-probability is returned too (the question, for the
    # qa_likelihood outcome): read off the same prompt evaluation, so it costs no second request
    span: tuple[int, int] | None = None
    # character offsets that cut the prompt into a prefix, pieces encoded each on its own after the prefix (the
    # documents, separately encoded) and a suffix that attends to all of them (the question and the answer cue);
    # only the in-process backend honours them (``encodes_separately``). None: the whole prompt jointly.
    pieces: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.span is not None:
            a, b = self.span
            if not 0 < a < b <= len(self.prompt):
                raise ValueError(f"span {self.span} is not a non-empty part of the prompt after its first character")
        if self.pieces is not None:
            cuts = self.pieces
            if len(cuts) < 2 or cuts[0] <= 0 or cuts[-1] >= len(self.prompt) or \
                    any(b <= a for a, b in zip(cuts, cuts[1:])):
                raise ValueError(f"pieces {cuts} are not increasing offsets strictly inside the prompt")
            if self.span is not None and self.span[0] <= cuts[-1]:
                raise ValueError(f"span {self.span} must start after the last piece (offset {cuts[-1]})")


@dataclass(frozen=True)
class ScoreResult:
    logprobs: tuple[float, ...]      # sum of token log-probabilities (nats) of each continuation
    n_tokens: tuple[int, ...]        # tokens of each continuation
    prompt_tokens: int
    evaluated_tokens: int            # tokens actually run through the model (prefix reuse makes this < prompt)
    latency_s: float                 # 0.0 from the cache
    cached: bool
    key: str
    span_logprob: float | None = None  # the request's span (None without one)
    span_tokens: int = 0

    @property
    def best(self) -> float:
        """Log-probability of the most likely accepted answer (aliases are alternatives, not a sum)."""
        return max(self.logprobs)


class Scorer(Protocol):
    model_id: str

    def score_many(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult | LLMError]: ...

    def complete(self, prompt: str, max_tokens: int = 24, stop: Sequence[str] = ("\n",)) -> str: ...


# Tokens per block of KV reuse and per batch (LlamaCppScorer). On 120 Monte Carlo trials of HotpotQA
# (scored in a batch and each alone, one run, load 1.9-2.0; docs/decisions.md): free-form reuse 54.5 / 54.0 s, 41,365 tokens
# evaluated, 54 answers moved by up to 0.53 nats; 128: 57.6 / 66.5 s, 48,099 tokens; 64: 59.5 s, 45,027; 256:
# 66.0 s, 56,035; none moved. About a seventh more time on these trials for results that do not depend on order.
REUSE_BLOCK = 128


def prefix_order(prompts: Sequence[str]) -> list[int]:
    """Indices of ``prompts`` in lexicographic order: consecutive prompts then share the longest beginnings,
    which the in-process backend's KV cache (and llama.cpp's prompt cache) reuses."""
    return sorted(range(len(prompts)), key=lambda i: prompts[i])


class _CachedScorer:
    """The cache/journal around a backend's ``_score_one``; ``model_id`` names the weights, not the backend, so a
    local file and an endpoint serving the same model still get separate keys (their numerics differ)."""

    model_id: str
    backend: str
    cache: CallCache | None
    # an endpoint's values belong to it (as LLMClient's keys); None (in-process) keeps the keys as they always were
    cache_endpoint: str | None = None
    encodes_separately = False   # honours ScoreRequest.pieces

    def key_params(self) -> dict:
        """What besides the request decides its values: the backend (and, in-process, the weights and the binding)."""
        return {"backend": self.backend}

    def key(self, req: ScoreRequest) -> str:
        payload = {"prompt": req.prompt, "continuations": list(req.continuations)}
        if req.span is not None:
            payload["span"] = list(req.span)
        if req.pieces is not None:
            payload["pieces"] = list(req.pieces)
        return make_key(self.model_id, "score", payload, self.key_params(), endpoint=self.cache_endpoint)

    def score_many(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult | LLMError]:
        """Each request's result, or its failure in its place; a final failure (`LLMInfrastructureError.final`)
        is raised instead, after it is journalled."""
        out: list[ScoreResult | LLMError | None] = [None] * len(requests)
        todo = []
        for i, req in enumerate(requests):
            if not req.continuations:
                raise ValueError("a score request needs at least one continuation")
            key = self.key(req)
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None and hit.response:
                r = hit.response
                out[i] = ScoreResult(tuple(r["logprobs"]), tuple(r["n_tokens"]), int(r["prompt_tokens"]),
                                     0, 0.0, True, key, r.get("span_logprob"), int(r.get("span_tokens") or 0))
            else:
                todo.append((i, key))
        if todo:
            self._before_batch()
        for i, key in sorted(todo, key=lambda item: requests[item[0]].prompt):
            req = requests[i]
            request_record = {"kind": "score", "model": self.model_id, "prompt": req.prompt,
                              "continuations": list(req.continuations), "backend": self.backend,
                              **({"span": list(req.span)} if req.span else {}),
                              **({"pieces": list(req.pieces)} if req.pieces else {})}
            t0 = time.monotonic()
            try:
                lps, ntok, ptok, evaluated, span_lp, span_n = self._score_one(req)
            except ScoringUnsupported:
                raise
            except LLMError as exc:
                if self.cache is not None:
                    self.cache.put(key, self.model_id, request_record, None, None, None, None,
                                   time.monotonic() - t0, status="error", error=str(exc)[:2000], attempts=1)
                if isinstance(exc, LLMInfrastructureError) and exc.final:
                    raise   # a bad key or URL, or an endpoint past its give-up bound: every other request meets it
                out[i] = exc
                continue
            latency = time.monotonic() - t0
            if self.cache is not None:
                self.cache.put(key, self.model_id, request_record,
                               {"logprobs": lps, "n_tokens": ntok, "prompt_tokens": ptok, "evaluated": evaluated,
                                "span_logprob": span_lp, "span_tokens": span_n},
                               f"{max(lps):.6f}", ptok, sum(ntok), latency, status="ok", attempts=1)
            out[i] = ScoreResult(tuple(lps), tuple(ntok), ptok, evaluated, latency, False, key, span_lp, span_n)
        return out  # type: ignore[return-value]

    def complete(self, prompt: str, max_tokens: int = 24, stop: Sequence[str] = ("\n",)) -> str:
        """The model's greedy continuation of ``prompt`` (e.g. its own answer after ``Answer:``), cut at the first
        ``stop`` string, through the call cache (kind ``complete``). Infrastructure errors raise, never an answer."""
        payload = {"prompt": prompt}
        params = {**self.key_params(), "max_tokens": max_tokens, "stop": list(stop)}
        key = make_key(self.model_id, "complete", payload, params, endpoint=self.cache_endpoint)
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is not None and hit.response:
            return str(hit.response["text"])
        self._before_batch()
        request = {"kind": "complete", "model": self.model_id, "prompt": prompt, **params}
        t0 = time.monotonic()
        try:
            text = self._complete_one(prompt, max_tokens, tuple(stop))
        except LLMError as exc:   # journalled, never an answer (the endpoint's error messages come redacted)
            if self.cache is not None:
                self.cache.put(key, self.model_id, request, None, None, None, None, time.monotonic() - t0,
                               status="error", error=str(exc)[:2000], attempts=1)
            raise
        for s in stop:   # backends differ in whether the stop string is kept
            text = text.split(s)[0] if s else text
        if self.cache is not None:
            self.cache.put(key, self.model_id, request, {"text": text}, text, None, None, time.monotonic() - t0,
                           status="ok", attempts=1)
        return text

    def _complete_one(self, prompt: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        raise NotImplementedError

    def _before_batch(self) -> None:
        """Called before the uncached requests of a batch are scored (the in-process backend sizes its threads)."""

    def _score_one(self, req: ScoreRequest) -> tuple[list[float], list[int], int, int, float | None, int]:
        """(log-probability and token count of each continuation, prompt tokens, tokens evaluated, the span's
        log-probability and token count or (None, 0))."""
        raise NotImplementedError


def binding_version() -> str:
    """The llama.cpp binding and its version: its kernels decide the last digits of every log-probability."""
    import llama_cpp

    return f"llama-cpp-python {llama_cpp.__version__}"


class LlamaCppScorer(_CachedScorer):
    """In-process llama.cpp scorer with KV-cache prefix reuse (one model, one context, one thread at a time).

    ``n_threads`` fixes llama.cpp's threads; without it they follow the cores other processes leave free,
    re-measured before each batch of requests (:class:`~.cores.CoreMeter`): a machine that gets busy mid-run
    makes it drop threads instead of spin-waiting, one that quiets down gives them back.

    ``reuse_block``: the previous prompt's KV cache is reused in whole blocks of this many tokens, and the rest
    is evaluated in batches that start and end on multiples of it. llama.cpp's quantized kernels do not sum
    bitwise-equally across batch shapes, so with free-form reuse a log-probability depended on how much of the
    prompt the request before it shared (54 of 120 Monte Carlo answer scorings moved, by up to 0.53 nats). Aligned,
    every token runs in a batch fixed by its own request: the same value from scratch, after any predecessor,
    in any order, shard or resumed run (docs/decisions.md, block-aligned KV-cache reuse). 0 = reuse every shared token
    and batch by ``n_batch`` (about a seventh faster on Monte Carlo trials, order-dependent in those digits).
    Greedy completions (``complete``) use llama-cpp-python's own generation, whose reuse is free-form."""

    backend = "llama.cpp-inprocess"
    encodes_separately = True

    def __init__(self, model_path: str | os.PathLike, model_id: str, cache: CallCache | None = None,
                 n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512,
                 reuse_block: int = REUSE_BLOCK):
        if not 0 <= reuse_block <= n_batch:
            raise ValueError(f"reuse_block must be 0 (off) or at most n_batch={n_batch}, got {reuse_block}")
        from llama_cpp import Llama  # optional heavy dependency: loaded only when a local model scores
        from llama_cpp._utils import suppress_stdout_stderr

        self.model_path = Path(model_path)
        self.model_id = model_id
        self.cache = cache
        self.reuse_block = reuse_block
        self._meter = None if n_threads else CoreMeter()
        self.n_threads = n_threads or self._meter.free()
        self._t0 = time.monotonic()
        self.thread_history: list[tuple[float, int]] = [(0.0, self.n_threads)]  # (seconds since start, threads)
        # verbose=False still lets llama.cpp's warning about its SWA cache through (the binding maps the library's
        # log levels one off), a line on stderr a user cannot act on
        with suppress_stdout_stderr(disable=False):
            self._llm = Llama(model_path=str(self.model_path), n_ctx=n_ctx, n_threads=self.n_threads,
                              n_threads_batch=self.n_threads, n_batch=n_batch, logits_all=False, verbose=False)
        # freed while the interpreter is whole: Llama.__del__ at shutdown finds llama_cpp's globals gone and prints
        # a TypeError traceback on stderr
        weakref.finalize(self, self._llm.close)
        # in every key: other weights under the same name, or another llama.cpp, give other log-probabilities
        self.weights_sha256 = file_sha256(self.model_path, cache)
        self.binding = binding_version()
        self._n_vocab = self._llm.n_vocab()
        self._lock = threading.Lock()
        self._n_ctx = n_ctx
        self._separate = None   # the SeparateEncoder, made by the first request with pieces
        self.tokens_evaluated = 0
        self.tokens_requested = 0

    def key_params(self) -> dict:
        return {"backend": self.backend, "weights_sha256": self.weights_sha256, "binding": self.binding}

    def _before_batch(self) -> None:
        if self._meter is None:
            return
        n = self._meter.free()
        if n != self.n_threads:
            with self._lock:
                self._llm._ctx.set_n_threads(n, n)
                if self._separate is not None:
                    self._separate.set_threads(n)
                self.n_threads = n
            self.thread_history.append((round(time.monotonic() - self._t0, 1), n))

    def _complete_one(self, prompt: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        with self._lock:   # llama.cpp's own generate() reuses the KV cache prefix the scoring left (input_ids)
            out = self._llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, top_k=1,
                                              stop=list(stop) or None)
        return str(out["choices"][0]["text"])

    def tokenize(self, text: str, bos: bool) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=bos, special=False)

    def _score_one(self, req: ScoreRequest) -> tuple[list[float], list[int], int, int, float | None, int]:
        if req.pieces is not None:
            return self._score_separately(req)
        with self._lock:
            if req.span is None:
                prompt, span_rows = self.tokenize(req.prompt, bos=True), []
            else:
                # the span tokenized on its own, so its tokens (and their log-probabilities) are exactly its text's
                a, b = req.span
                head = self.tokenize(req.prompt[:a], bos=True)
                span = self.tokenize(req.prompt[a:b], bos=False)
                prompt = head + span + self.tokenize(req.prompt[b:], bos=False)
                span_rows = list(range(len(head) - 1, len(head) + len(span) - 1))
            lps, ntok, evaluated, span_lp = [], [], 0, None
            for cont in req.continuations:
                target = self.tokenize(cont, bos=False)
                if not target:
                    raise ValueError(f"continuation {cont!r} has no tokens")
                lp, ev, at = self._teacher_forced(prompt, target, span_rows if span_lp is None else ())
                if span_lp is None and span_rows:
                    span_lp = float(sum(at[r] for r in span_rows))
                lps.append(lp)
                ntok.append(len(target))
                evaluated += ev
            return lps, ntok, len(prompt), evaluated, span_lp, len(span_rows)

    def _teacher_forced(self, prompt: list[int], target: list[int],
                        extra_rows=()) -> tuple[float, int, dict[int, float]]:
        """The target's log-probability after the prompt, the tokens evaluated, and the log-probability of the
        next token at every row of ``extra_rows`` (prompt positions) as well."""
        llm = self._llm
        tokens = prompt + target
        if len(tokens) > llm.n_ctx():
            raise LLMError(f"prompt of {len(prompt)} + {len(target)} tokens exceeds the context of {llm.n_ctx()}")
        # reuse the cached prefix, but re-run at least the last prompt token (its logits predict the first target)
        # and every extra row
        cached = llm.input_ids[: llm.n_tokens].tolist()
        limit = min([len(prompt) - 1, *extra_rows])
        common = 0
        for a, b in zip(cached, tokens[:limit]):
            if a != b:
                break
            common += 1
        if self.reuse_block:
            common -= common % self.reuse_block   # whole blocks only: the batches below stay aligned to them
        step = self.reuse_block or llm.n_batch
        llm.n_tokens = common
        llm._ctx.kv_cache_seq_rm(-1, common, -1)
        target_rows = range(len(prompt) - 1, len(tokens) - 1)   # positions whose next token is a target token
        rows = set(target_rows) | set(extra_rows)
        logits_at: dict[int, float] = {}
        batch = llm._batch
        for start in range(common, len(tokens) - 1, step):
            chunk = tokens[start: min(len(tokens) - 1, start + step)]
            batch.set_batch(batch=chunk, n_past=start, logits_all=False)
            for i in range(len(chunk)):
                batch.batch.logits[i] = (start + i) in rows
            llm._ctx.decode(batch)
            llm.input_ids[start: start + len(chunk)] = chunk
            llm.n_tokens = start + len(chunk)
            for i in range(len(chunk)):
                pos = start + i
                if pos in rows:
                    ptr = llm._ctx.get_logits_ith(i)
                    row = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                                shape=(self._n_vocab,))
                    logits_at[pos] = log_softmax_at(row, tokens[pos + 1])
        evaluated = len(tokens) - 1 - common
        self.tokens_evaluated += evaluated
        self.tokens_requested += len(tokens) - 1
        return float(sum(logits_at[p] for p in target_rows)), evaluated, logits_at

    def _score_separately(self, req: ScoreRequest) -> tuple[list[float], list[int], int, int, float | None, int]:
        """The request with its pieces encoded each on its own (:mod:`.separate`): each piece, the prefix and the
        suffix tokenized on their own, so a piece has the same tokens in every prompt that holds it."""
        cuts = req.pieces
        with self._lock:
            if self._separate is None:
                from .separate import SeparateEncoder
                self._separate = SeparateEncoder(self._llm._model, self._n_ctx, self.n_threads)
                weakref.finalize(self, self._separate.close)
            prefix = self.tokenize(req.prompt[:cuts[0]], bos=True)
            pieces = [self.tokenize(req.prompt[a:b], bos=False) for a, b in zip(cuts, cuts[1:])]
            head = []
            if req.span is None:
                suffix, rows = self.tokenize(req.prompt[cuts[-1]:], bos=False), []
            else:
                a, b = req.span
                head = self.tokenize(req.prompt[cuts[-1]:a], bos=False)
                span = self.tokenize(req.prompt[a:b], bos=False)
                suffix = head + span + self.tokenize(req.prompt[b:], bos=False)
                rows = list(range(len(head) - 1, len(head) + len(span) - 1))
            targets = [self.tokenize(c, bos=False) for c in req.continuations]
            if not all(targets) or not suffix or not all(pieces) or (req.span is not None and not head):
                raise ValueError(f"a piece, the suffix, the text before the span or a continuation has no tokens "
                                 f"(pieces {cuts}, continuations {req.continuations!r})")
            try:
                lps, evaluated, at = self._separate.score(prefix, pieces, suffix, targets, rows)
            except ValueError as exc:
                raise LLMError(str(exc)) from exc
            n_prompt = len(prefix) + sum(map(len, pieces)) + len(suffix)
            self.tokens_evaluated += evaluated
            self.tokens_requested += n_prompt + sum(len(t) for t in targets) - len(targets)
            span_lp = float(sum(at.values())) if rows else None
            return lps, [len(t) for t in targets], n_prompt, evaluated, span_lp, len(rows)

    def forget_prefix(self) -> None:
        """Empty the KV cache: the next request is evaluated from scratch (what a fresh scorer would give)."""
        with self._lock:
            self._llm.n_tokens = 0
            self._llm._ctx.kv_cache_seq_rm(-1, 0, -1)

    def close(self) -> None:
        if self._separate is not None:
            self._separate.close()
        self._llm.close()


class EndpointScorer(_CachedScorer):
    """Prompt log-probabilities from an OpenAI-compatible ``/v1/completions`` endpoint via the `openai` client.

    ``mode``: ``prompt_logprobs`` (vLLM: ``extra_body={"prompt_logprobs": 0}``), ``echo`` (``echo=True,
    logprobs=0``; llama.cpp's server and the legacy OpenAI completions API) or ``auto`` (try vLLM's first, then
    echo). Continuation tokens are found by character offsets, so the prompt must end on a token boundary (the
    solver prompt ends with ``Answer:`` and the continuation starts with a space).

    Known limit: llama-cpp-python's server (0.3.x) echoes correct prompt log-probabilities only for models whose
    prompts start with a BOS token (Gemma, Llama); for models without one (SmolLM2) each echoed value is taken from
    the wrong logits row, and nothing in the response tells. Score such models in-process (the default for the
    packaged models) or behind vLLM."""

    backend = "openai-completions"

    def __init__(self, client, model: str, cache: CallCache | None = None, mode: str = "auto"):
        if mode not in ("auto", "prompt_logprobs", "echo"):
            raise ValueError(f"mode must be auto, prompt_logprobs or echo, got {mode!r}")
        if not isinstance(client, LLMClient):   # a bare openai.OpenAI: the same endpoint and key, one attempt
            client = LLMClient(str(client.base_url), model, api_key=client.api_key, max_retries=0)
        # the project's LLMClient: its endpoint (in the keys), its retries, classification and redaction
        self._llm = client
        self._client = client.openai_client
        self.cache_endpoint = client.cache_endpoint
        self.model_id = model
        self.cache = cache
        self.mode = mode

    def _score_one(self, req: ScoreRequest) -> tuple[list[float], list[int], int, int, float | None, int]:
        lps, ntok, ptok, span = [], [], 0, None
        for cont in req.continuations:
            lp, n, p, sp = self._one(req.prompt, cont, req.span if span is None else None)
            lps.append(lp)
            ntok.append(n)
            ptok = p
            span = span or sp
        span_lp, span_n = span if span else (None, 0)
        return lps, ntok, ptok, ptok + sum(ntok), span_lp, span_n

    def _complete_one(self, prompt: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        def attempt() -> str:
            resp = self._client.completions.create(model=self.model_id, prompt=prompt, max_tokens=max_tokens,
                                                   temperature=0.0, stop=list(stop) or None)
            return self._llm.check_response("completion", resp).text   # the client's checks, its key masked

        return self._llm.retrying(f"completion call to {self.model_id!r}", attempt)[0]

    def _one(self, prompt: str, cont: str, span: tuple[int, int] | None = None
             ) -> tuple[float, int, int, tuple[float, int] | None]:
        import openai  # the SDK the client was made with (~0.7 s): not loaded for every code-location import

        modes = ["prompt_logprobs", "echo"] if self.mode == "auto" else [self.mode]
        refusals: list[str] = []
        for mode in modes:
            def attempt():
                try:
                    if mode == "prompt_logprobs":
                        resp = self._client.completions.create(
                            model=self.model_id, prompt=prompt + cont, max_tokens=1, temperature=0.0,
                            extra_body={"prompt_logprobs": 0})
                    else:
                        resp = self._client.completions.create(
                            model=self.model_id, prompt=prompt + cont, max_tokens=1, temperature=0.0, echo=True,
                            logprobs=0)
                except openai.APIStatusError as exc:
                    # the option refused (tried first in auto mode, or said so): "unsupported", not a failure
                    if exc.status_code in (400, 404, 422) and (
                            (mode != modes[-1] and exc.status_code != 404) or UNSUPPORTED.search(str(exc))):
                        return exc
                    raise
                data = self._llm.check_response("score", resp).data
                return (from_prompt_logprobs if mode == "prompt_logprobs" else from_echo)(data, prompt, cont, span)

            got = self._llm.retrying(f"score call to {self.model_id!r} ({mode})", attempt)[0]
            if isinstance(got, Exception):
                refusals.append(f"{mode}: HTTP {got.status_code} {self._llm.redact_secrets(got.message)[:200]}")
            elif got is not None:
                return got
        raise ScoringUnsupported(
            f"endpoint model {self.model_id!r} returns no prompt log-probabilities (tried {', '.join(modes)}"
            f"{'; ' + '; '.join(refusals) if refusals else ''}); use a server that does (vLLM, llama.cpp) or set "
            "the benchmark's `monte_carlo: {outcome: success}` to label by generated answers instead")
