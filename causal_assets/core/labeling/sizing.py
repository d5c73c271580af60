"""How long Monte Carlo labels take, before they are paid for: calls per question and seconds per call.

A question costs `budget` solver calls, one prompt evaluation each; a call's time grows with its prompt, about half
the pool's text (`pool size / 2 x` the mean characters a pooled document shows, ~4 a token: `shown_chars`) plus the
question. Seconds per token come from the rates measured on 2 idle cores with the packaged Gemma-3-270M
(`SECONDS_PER_*_2_CORES`, docs/sizing.md), times what this machine gives the scorer now (`measure_machine`): the
solver itself timed on a short passage where its file is on disk, else the share of a core a busy thread gets on
the threads the scorer would take. A hosted endpoint changes the second factor only.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from causal_assets.core.llm.cores import CoreMeter, free_cores_by_load, free_from_busy
from causal_assets.core.llm.models import LOCAL_MODELS, local_model_path
from causal_assets.core.stored.build_time import build_seconds
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
# 32) with every trial in the pool's order and 96% (31.3) with each in its own, a questions file's default.
UNDECIDED_SHARE = 0.75
# This data directory's latest labelling says how much slower than quiet the machine runs the solver, where it is
# this recent and this large (`history_machine`). Beside other sessions' jobs, HotpotQA's labelling took 1.24 and 1.01
# times what the run before it said, where readings of the solver a few seconds long missed by up to 1.46 times:
# such load holds for the hour, and a few seconds of it vary by half (docs/sizing.md).
HISTORY_MAX_AGE_S = 3600.0
MIN_HISTORY_CALLS = 20          # fewer uncached calls than this say little about the rate
# The rates above are two cores' worth of llama.cpp threads (`Machine.slowdown`).
QUIET_CORES = 2
# How long the estimate watches the machine where it cannot time the solver itself: a busy thread's share of a core,
# and the cores other processes keep busy meanwhile. Three 2-s readings in a row agreed within 0.01 at load 3.9.
PROBE_S = 2.0
# Where there is no recent labelling, the solver timed: a passage of about 270 prompt tokens evaluated on the threads
# the scorer would take, in ms a token, against the reading that goes with the quiet rates. That reference is
# measured, not the 2 ms a token of plain prompt evaluation on 2 idle cores: beside other sessions' jobs (load 5-7)
# the probe read 4.7-9.3 ms (median 6.5) while HotpotQA's labelling ran 4.1-4.3 times its quiet time; a labelling
# call's output-layer reads stream memory, which other jobs slow more than the probe's batched evaluation.
PROBE_TEXT = ("The river rose through the night, and by morning the old mill stood in water up to its second "
              "floor. The miller's daughter rowed the ledgers to the church on the hill, where the village kept "
              "its records dry until the flood went down in the spring. ") * 5
QUIET_SECONDS_PER_PROMPT_TOKEN = 0.0016
# Two readings 7 s apart at load 6 said 5.6 and 9.3 ms a token: the median of three, about 3 s at that load.
PROBE_REPEATS = 3


@dataclass(frozen=True)
class Machine:
    """What this machine gives the in-process scorer now, as a factor on the quiet rates: `slowdown` seconds per
    second on 2 idle cores, and how it was measured."""

    slowdown: float
    how: str

    def describe(self) -> str:
        return f"{self.how}: {self.slowdown:.1f} times the quiet time"


def cpu_share_machine(threads: int, share: float) -> Machine:
    """Two cores' worth of work over what `threads` llama.cpp threads get at `share` of a core each (at least the
    quiet time: more cores than the rates' two are not promised)."""
    slowdown = max(1.0, QUIET_CORES / (max(1, threads) * max(share, 0.05)))
    return Machine(slowdown, f"{threads} llama.cpp thread(s) getting {share:.2f} of a core each now")


def busy_share(seconds: float) -> float:
    """The share of a core this thread gets while it keeps busy for `seconds`: its CPU time over the wall time."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    x = 0
    while time.perf_counter() - wall0 < seconds:
        for i in range(10_000):
            x += i
    wall = time.perf_counter() - wall0
    return min(1.0, (time.thread_time() - cpu0) / wall) if wall > 0 else 1.0


def time_solver(model_path: Path, threads: int, repeats: int = PROBE_REPEATS) -> float:
    """Seconds per prompt token of the GGUF at `model_path` on `threads` threads now: the median of `repeats`
    evaluations of `PROBE_TEXT` after a short warm-up (the load and the warm-up are not timed)."""
    from llama_cpp import Llama
    from llama_cpp._utils import suppress_stdout_stderr

    with suppress_stdout_stderr(disable=False):
        llm = Llama(model_path=str(model_path), n_ctx=1024, n_threads=threads, n_threads_batch=threads, n_batch=512,
                    logits_all=False, verbose=False)
    try:
        tokens = llm.tokenize(PROBE_TEXT.encode("utf-8"), add_bos=True)
        llm.eval(tokens[:16])
        times = []
        for _ in range(repeats):
            llm.reset()
            t0 = time.perf_counter()
            llm.eval(tokens)
            times.append((time.perf_counter() - t0) / len(tokens))
        return float(sorted(times)[len(times) // 2])
    finally:
        llm.close()


def measure_machine(solver_path: Path | None = None, cores: int | None = None,
                    seconds: float = PROBE_S) -> Machine:
    """`Machine` now: the solver's GGUF at `solver_path` timed on the threads the scorer would take, where it is on
    disk (an estimate assembles nothing); else a busy thread's share of a core for `seconds`, beside the cores other
    processes keep busy meanwhile (`CoreMeter`; the load average where `/proc/stat` cannot be read)."""
    meter = CoreMeter(cores, sleep=lambda _s: None)
    meter.others_busy()                    # the first reading: the window starts here
    if solver_path is not None and Path(solver_path).is_file():
        time.sleep(0.5)
        threads = meter.free()
        rate = time_solver(Path(solver_path), threads)
        return Machine(max(0.5, rate / QUIET_SECONDS_PER_PROMPT_TOKEN),
                       f"the solver timed now on {threads} thread(s), {rate * 1000:.1f} ms a prompt token")
    share = busy_share(seconds)
    busy = meter.others_busy()
    threads = free_cores_by_load(meter.total) if busy is None else free_from_busy(busy, meter.total)
    return cpu_share_machine(threads, share)


def solver_file(name: str, models_dir: str | Path | None) -> Path | None:
    """The packaged local solver `name`'s GGUF where it is on disk already (None: unknown, or not assembled yet)."""
    model = LOCAL_MODELS.get(name)
    if model is None:
        return None
    if model.assembled:
        path = Path(models_dir) / model.gguf if models_dir else None
        return path if path is not None and path.is_file() else None
    return local_model_path(name, models_dir)


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


def quiet_seconds(questions: int, calls: float, tokens: float, separate: bool = True) -> float:
    """Seconds of `calls` solver calls of `tokens` evaluated prompt tokens each, over `questions` questions, on 2 idle
    cores: with the documents encoded separately, each question's pool once (about twice a call's prompt) and then
    each call over their states; read jointly, every call's prompt."""
    if separate:
        return questions * 2 * tokens * SECONDS_PER_POOL_TOKEN_2_CORES + \
            calls * (SECONDS_PER_CALL_SEPARATE_2_CORES + tokens * SECONDS_PER_TOKEN_SEPARATE_2_CORES)
    return calls * tokens * SECONDS_PER_TOKEN_2_CORES


def history_machine(base, benchmarks: list[str] | None = None, separate: bool = True,
                    now: float | None = None) -> Machine | None:
    """The slowdown of this data directory's latest labelling (its uncached ok solver calls in `solver_calls` of
    `benchmarks`, default every benchmark's: their seconds over `quiet_seconds` of the same calls, question by
    question), where it is at most `HISTORY_MAX_AGE_S` old and holds `MIN_HISTORY_CALLS` calls; else None. The same
    encoding as now is assumed."""
    now = time.time() if now is None else now
    if benchmarks is None:
        try:
            benchmarks = sorted(p.stem for p in asset_path(base, "solver_calls", "x").parent.glob("*.parquet"))
        except OSError:
            benchmarks = []
    latest = None
    for name in benchmarks:
        path = asset_path(base, "solver_calls", name)
        try:
            age = now - path.stat().st_mtime
            calls = read_parquet(path, columns=["query_id", "status", "cached", "latency_s", "prompt_tokens"])
        except Exception:   # missing, unreadable, or a table from an older schema: no history from it
            continue
        ok = calls[(calls["status"] == "ok") & ~calls["cached"].astype(bool)].dropna(subset=["latency_s",
                                                                                            "prompt_tokens"])
        ok = ok[ok["prompt_tokens"] > 0]
        if len(ok) >= MIN_HISTORY_CALLS and age <= HISTORY_MAX_AGE_S and (latest is None or age < latest[0]):
            latest = (age, name, ok)
    if latest is None:
        return None
    age, name, ok = latest
    per_question = ok.groupby("query_id").agg(n=("latency_s", "size"), tokens=("prompt_tokens", "mean"),
                                                 seconds=("latency_s", "sum"))
    quiet = sum(quiet_seconds(1, r.n, r.tokens, separate) for r in per_question.itertuples())
    slowdown = max(0.5, float(per_question["seconds"].sum()) / quiet) if quiet > 0 else 1.0
    return Machine(slowdown, f"the labelling of {name!r} {duration(age)} ago ({len(ok)} solver calls)")


def estimate_labels(questions: int, budget: int, pool_size: int, doc_chars: float, machine: Machine | None = None,
                    seconds_per_call: float | None = None, separate: bool = True, code: bool = True,
                    stop_when_decided: bool = True) -> LabelEstimate:
    """Seconds to label `questions` questions (module docstring); `doc_chars`: the mean characters a pooled
    document shows (`shown_chars`); `code`: a code corpus (shorter tokens). `machine`: what the machine gives the
    scorer (None: `measure_machine` now, without timing the solver). `seconds_per_call`: a hosted endpoint's
    measured latency, which replaces the per-token rate; `separate`: the documents encoded separately;
    `stop_when_decided`: the calls `expected_calls` says, else the whole budget."""
    calls = int(round(questions * expected_calls(budget, pool_size, stop_when_decided)))
    if seconds_per_call is not None:
        return LabelEstimate(questions, calls, calls * seconds_per_call, f"{seconds_per_call:.2f} s per call")
    machine = machine or measure_machine()
    seconds = quiet_seconds(questions, calls, evaluated_tokens(pool_size, doc_chars, code), separate)
    return LabelEstimate(questions, calls, seconds * machine.slowdown,
                         f"the rate measured on 2 idle cores, times {machine.describe()}")


def machine_now(base, benchmarks: list[str] | None = None, solver_path: Path | None = None,
                separate: bool = True) -> Machine:
    """What the estimate scales the quiet rate by: this data directory's latest labelling where it is recent
    (`history_machine`), else a measurement now (`measure_machine`)."""
    return history_machine(base, benchmarks, separate) or measure_machine(solver_path)


# Tuning and evaluation of the default lineage (README command 1, three fresh clones at load 1.7-2.4 on 2 cores):
# tuning 83-90 s, the evaluation with its answer utility 135-151 s; the stages whose time does not follow the chunks
# or the labelling calls.
TUNE_AND_EVALUATE_S = 220.0
LINEAGE_INDEX = ["corpus_embeddings", "sparse_postings", "graph_nodes", "graph_entity_embeddings"]


def lineage_estimate(chunk_chars: Sequence[int], code: bool, labels: LabelEstimate | None,
                     load: float | None = None, cores: int | None = None) -> tuple[float, str]:
    """(seconds, one line) for the whole lineage of a partition: the index and graph of chunks of these lengths
    (characters, as the indexes see them), the labels (`estimate_labels`, already at this machine's rate), tuning
    and evaluation; the index and the rest are scaled by the load now as the build's estimate is."""
    load = os.getloadavg()[0] if load is None else load
    slowdown = max(1.0, load / (cores or os.cpu_count() or 1))
    index = build_seconds(chunk_chars, code, LINEAGE_INDEX) * slowdown
    rest = TUNE_AND_EVALUATE_S * slowdown
    label_s = labels.seconds if labels is not None else 0.0
    parts = [f"index and graph of {len(chunk_chars):,} chunks ~{duration(index)}"]
    if labels is not None:
        parts.append(f"labels of {labels.questions} questions x {labels.calls // max(1, labels.questions)} solver "
                     f"calls ~{duration(label_s)} (from {labels.source})")
    parts.append(f"tuning and evaluation ~{duration(rest)}")
    total = index + label_s + rest
    return total, f"about {duration(total)} at the load {load:.1f} now ({'; '.join(parts)})"
