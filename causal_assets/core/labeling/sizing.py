"""How long Monte Carlo labels take, before they are paid for: calls per question and seconds per call.

A question costs `budget` solver calls, one prompt evaluation each; a call's time grows with its prompt, about half
the pool's text (`pool size / 2 x` the mean characters a pooled document shows, ~4 a token: `shown_chars`) plus the
question. Seconds per token
come from this data directory's own `solver_calls` history (this machine, under the load it had), else from the
rate measured on 2 idle cores with the packaged Gemma-3-270M (`SECONDS_PER_TOKEN_2_CORES`, docs/sizing.md) scaled
by the load now. A hosted endpoint changes the second factor only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd

from causal_assets.core.stored.needs import build_seconds
from causal_assets.core.foundation.progress import duration
from causal_assets.core.foundation.storage import asset_path, read_parquet

CHARS_PER_TOKEN = 4.0
QUESTION_TOKENS = 40            # the question, the answer and the prompt's own words
# Evaluated prompt tokens per token of that estimate: the prompt's template and code's short tokens add some, the
# prefix a call shares with the one before (the scorer reuses its KV cache) takes some away. Measured on the
# default lineage's 192 labelling calls: 546 evaluated tokens per call against 440 estimated.
TOKENS_RATIO = 1.25
# Seconds per evaluated prompt token, Gemma-3-270M in-process on 2 idle cores: the default lineage's 192 labelling
# calls in 131 s at ~546 evaluated tokens each (docs/sizing.md).
SECONDS_PER_TOKEN_2_CORES = 0.00125
# The same with the documents encoded separately (`document_encoding`, the in-process default): each document of the
# pool is encoded once per question (a rate per pool token), and a call then evaluates the question and the answer
# over the documents' loaded states (a fixed part and a small one per prompt token). Fitted to three runs of the shared
# man pages one after the other (load 1.5-2.0; 16 calls of 803 and of 1,670 prompt tokens, 28.7 of 1,991); it
# predicts HotpotQA's 6.6 s a question (21.6 calls of 535 tokens) within 10%.
SECONDS_PER_POOL_TOKEN_2_CORES = 0.00184
SECONDS_PER_CALL_SEPARATE_2_CORES = 0.148
SECONDS_PER_TOKEN_SEPARATE_2_CORES = 0.0000685
# Code's short tokens: prompt tokens per estimated token of code corpora (`TOKENS_RATIO`); prose holds ~4 characters
# a token (the man pages: 1,991 prompt tokens a call against 1,990 estimated).
PROSE_TOKENS_RATIO = 1.0
# With `stop_when_decided` the rest of the budget after the design's first orthogonal block runs only where a label is
# still undecided: on HotpotQA's train half for 70% of the rest (21.6 of 24 calls), on the man pages for 79% (28.7 of
# 32).
UNDECIDED_SHARE = 0.75
MIN_HISTORY_CALLS = 20          # fewer uncached calls than this say little about the rate


@dataclass(frozen=True)
class LabelEstimate:
    questions: int
    calls: int
    seconds: float
    source: str                 # where the rate came from, for the message

    @property
    def seconds_per_question(self) -> float:
        return self.seconds / max(1, self.questions)


def evaluated_tokens(pool_size: int, doc_chars: float, code: bool = True) -> float:
    """The prompt tokens a call evaluates: the text of half the pool's documents (a balanced subset) of `doc_chars`
    characters each and the question, times the measured `TOKENS_RATIO` (`PROSE_TOKENS_RATIO` for prose)."""
    return (pool_size / 2 * doc_chars / CHARS_PER_TOKEN + QUESTION_TOKENS) * (TOKENS_RATIO if code else
                                                                             PROSE_TOKENS_RATIO)


def expected_calls(budget: int, pool_size: int, stop_when_decided: bool = True) -> float:
    """Solver calls a question is expected to take: the budget, or with `stop_when_decided` the design's first
    orthogonal block (the Hadamard order above the pool size) and `UNDECIDED_SHARE` of the rest."""
    first = 1 << (pool_size).bit_length()     # the smallest power of two above the pool size
    if not stop_when_decided or first >= budget:
        return float(budget)
    return first + UNDECIDED_SHARE * (budget - first)


def shown_chars(texts: pd.Series, doc_chars: int) -> float:
    """The mean characters the solver reads of a document of `texts` (a corpus's chunk texts), each shortened to
    `doc_chars` (the pools' budget): short documents cost less than the budget says."""
    return float(texts.astype(str).str.len().clip(upper=doc_chars).mean()) if len(texts) else float(doc_chars)


def history_rate(base, benchmarks: list[str]) -> tuple[float, int] | None:
    """(seconds per evaluated prompt token, calls it is the median of) over the uncached ok calls recorded in the
    `solver_calls` tables of `benchmarks` under `base`, or None when they hold fewer than `MIN_HISTORY_CALLS`."""
    rates = []
    for name in benchmarks:
        path = asset_path(base, "solver_calls", name)
        if not path.exists():
            continue
        try:
            calls = read_parquet(path, columns=["status", "cached", "latency_s", "prompt_tokens"])
        except Exception:   # a table from an older schema: no history from it
            continue
        ok = calls[(calls["status"] == "ok") & ~calls["cached"].astype(bool)].dropna(subset=["latency_s",
                                                                                            "prompt_tokens"])
        ok = ok[ok["prompt_tokens"] > 0]
        rates.append(ok["latency_s"] / ok["prompt_tokens"])
    joined = pd.concat(rates) if rates else pd.Series(dtype=float)
    if len(joined) < MIN_HISTORY_CALLS:
        return None
    return float(joined.median()), len(joined)


def estimate_labels(questions: int, budget: int, pool_size: int, doc_chars: float,
                    history: tuple[float, int] | None = None, load: float | None = None,
                    cores: int | None = None, seconds_per_call: float | None = None,
                    separate: bool = True, code: bool = True, stop_when_decided: bool = True) -> LabelEstimate:
    """Seconds to label `questions` questions (module docstring); `doc_chars`: the mean characters a pooled
    document shows (`shown_chars`); `code`: a code corpus (shorter tokens). `seconds_per_call`: a hosted endpoint's
    measured latency, which replaces the per-token rate; `separate`: the documents encoded separately (the rate
    without history); `stop_when_decided`: the calls `expected_calls` says, else the whole budget."""
    calls = int(round(questions * expected_calls(budget, pool_size, stop_when_decided)))
    if seconds_per_call is not None:
        return LabelEstimate(questions, calls, calls * seconds_per_call, f"{seconds_per_call:.2f} s per call")
    tokens = evaluated_tokens(pool_size, doc_chars, code)
    if history is not None:
        rate, n = history
        return LabelEstimate(questions, calls, calls * tokens * rate,
                             f"this data directory's {n} earlier solver calls")
    load = os.getloadavg()[0] if load is None else load
    cores = cores or os.cpu_count() or 1
    slowdown = max(1.0, load / cores) * max(1.0, 2 / cores)   # the rate is for 2 free cores
    if separate:   # each document encoded once per question, then each call over their states
        seconds = questions * 2 * tokens * SECONDS_PER_POOL_TOKEN_2_CORES + \
            calls * (SECONDS_PER_CALL_SEPARATE_2_CORES + tokens * SECONDS_PER_TOKEN_SEPARATE_2_CORES)
    else:
        seconds = calls * tokens * SECONDS_PER_TOKEN_2_CORES
    return LabelEstimate(questions, calls, seconds * slowdown,
                         f"the rate measured on 2 idle cores, at the load {load:.1f} now")


# Tuning and evaluation of the default lineage on 2 idle cores: 56 s + 33 s measured at load ~2.5 (docs/sizing.md);
# the stages whose time does not follow the chunks or the labelling calls.
TUNE_AND_EVALUATE_S = 90.0
LINEAGE_INDEX = ["corpus_embeddings", "sparse_postings", "graph_nodes", "graph_entity_embeddings"]


def lineage_estimate(n_chunks: int, code: bool, labels: LabelEstimate | None, load: float | None = None,
                     cores: int | None = None) -> tuple[float, str]:
    """(seconds, one line) for the whole lineage of a partition: the index and graph of `n_chunks` chunks, the
    labels (`estimate_labels`, already at this machine's rate), tuning and evaluation; the index and the rest are
    scaled by the load now as the build's estimate is."""
    load = os.getloadavg()[0] if load is None else load
    slowdown = max(1.0, load / (cores or os.cpu_count() or 1))
    index = build_seconds(n_chunks, code, LINEAGE_INDEX) * slowdown
    rest = TUNE_AND_EVALUATE_S * slowdown
    label_s = labels.seconds if labels is not None else 0.0
    parts = [f"index and graph of {n_chunks:,} chunks ~{duration(index)}"]
    if labels is not None:
        parts.append(f"labels of {labels.questions} questions x {labels.calls // max(1, labels.questions)} solver "
                     f"calls ~{duration(label_s)} (from {labels.source})")
    parts.append(f"tuning and evaluation ~{duration(rest)}")
    total = index + label_s + rest
    return total, f"about {duration(total)} at the load {load:.1f} now ({'; '.join(parts)})"
