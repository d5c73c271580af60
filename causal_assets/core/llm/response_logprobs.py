"""An OpenAI-compatible endpoint's prompt log-probabilities, read out of its answer: vLLM's ``prompt_logprobs`` or the
completions API's ``echo`` + ``logprobs``, the continuation's sum and token count and a span's, and what a server says
when it does not offer either (`UNSUPPORTED`). A value that is no log-probability makes the response malformed;
a missing one makes it unusable (None), never 0. Used by `scoring.EndpointScorer`."""
from __future__ import annotations

import math
import re

from .client import MalformedResponse


# What a server says when it does not offer an option (OpenAI: "This is a chat model and not supported in the
# v1/completions endpoint"; others name the parameter they do not know).
UNSUPPORTED = re.compile(r"not supported|unsupported|not (?:allowed|permitted|implemented)|unrecognized|"
                         r"unknown (?:field|parameter|argument)|extra (?:fields|inputs)|chat model|echo|logprobs",
                         re.IGNORECASE)
# A log-probability above this (nats) is a probability above 1 beyond float rounding: the response is broken.
MAX_LOGPROB = 1e-3


def from_prompt_logprobs(data: dict, prompt: str, cont: str, span: tuple[int, int] | None = None
                          ) -> tuple[float, int, int, tuple[float, int] | None] | None:
    """vLLM: ``choices[0].prompt_logprobs`` is a list (first entry None) of {token_id: {logprob, decoded_token}}.
    Requested with ``prompt_logprobs: 0``, each entry holds the prompt token alone; an entry with several tokens
    cannot be read without token ids, so the response then counts as unusable."""
    choice = (data.get("choices") or [{}])[0]
    plp = choice.get("prompt_logprobs") or data.get("prompt_logprobs")
    if not plp:
        return None
    offsets, values, pos = [], [], 0
    for entry in plp:
        if not entry:
            offsets.append(pos)
            values.append(None)
            continue
        if len(entry) != 1:
            return None
        only = next(iter(entry.values()))
        offsets.append(pos)
        values.append(only.get("logprob") if isinstance(only, dict) else None)
        pos += len(only.get("decoded_token", "") if isinstance(only, dict) else "")
    return _continuation_and_span(offsets, values, len(prompt), span)


def from_echo(data: dict, prompt: str, cont: str, span: tuple[int, int] | None = None
               ) -> tuple[float, int, int, tuple[float, int] | None] | None:
    choice = (data.get("choices") or [{}])[0]
    lp = choice.get("logprobs") or {}
    offsets, tokens, values = lp.get("text_offset"), lp.get("tokens"), lp.get("token_logprobs")
    if not offsets or not tokens or not values:
        return None
    if not len(offsets) == len(tokens) == len(values):
        raise MalformedResponse(f"echo log-probabilities of {len(tokens)} tokens, {len(offsets)} offsets and "
                         f"{len(values)} values")
    # keep only echoed prompt tokens (drop the generated one after the full text)
    n = sum(1 for o in offsets if o < len(prompt) + len(cont))
    return _continuation_and_span(offsets[:n], values[:n], len(prompt), span)


def _continuation_and_span(offsets: list[int], values: list, prompt_len: int, span: tuple[int, int] | None
                           ) -> tuple[float, int, int, tuple[float, int] | None] | None:
    """From per-token (character offset, log-probability): the continuation's sum and token count (the tokens
    from ``prompt_len`` on), the number of prompt tokens, and the span's (sum, tokens) for the tokens starting
    inside it. None when a needed value is missing (the response is then unusable, never read as 0); a value that
    is no log-probability (not a finite number <= 0) makes the response malformed (retried, never cached)."""
    if len(values) != len(offsets):
        raise MalformedResponse(f"{len(values)} log-probabilities for {len(offsets)} tokens")
    first = next((i for i, o in enumerate(offsets) if o >= prompt_len), None)
    if first is None or first == len(offsets):
        return None
    picked = values[first:]
    if any(v is None for v in picked):
        return None
    _check_logprobs(picked)
    span_out = None
    if span is not None:
        inside = [values[i] for i, o in enumerate(offsets[:first]) if span[0] <= o < span[1]]
        if not inside or any(v is None for v in inside):
            return None
        _check_logprobs(inside)
        span_out = (float(sum(inside)), len(inside))
    return float(sum(picked)), len(picked), first, span_out


def _check_logprobs(values: list) -> None:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v > MAX_LOGPROB:
            raise MalformedResponse(f"{v!r} is not a log-probability (a finite number <= 0)")
