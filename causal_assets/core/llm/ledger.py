"""The cost ledger: what each stage of a run spent on the LLM, per model: calls paid (made) and taken from the call
cache, errored calls, prompt and completion tokens, and the stage's wall and CPU seconds.

Every LLM call of the product goes through the call cache (`llm.cache.CallCache`): a served hit is a cached call,
a journalled ok row a paid one, an error row an errored one. The cache reports each to this process's counters
(`record`), and a stage reads the difference over its own work (`Meter`). A stage runs in one process (the
multiprocess executor gives each step its own), so the counters are that step's; CPU seconds are the process's
(the in-process scorer's threads included, a local llama.cpp server's process not).

Rows are kept under the storage base, one file per (benchmark, stage) holding every run's rows
(`cost_ledger/<benchmark>--<stage>.parquet`, the view `cost_ledger`).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pandas as pd

from causal_assets.core.foundation.storage import read_parquet, write_parquet_atomic

LEDGER = "cost_ledger"
COLUMNS = ["benchmark", "stage", "run_id", "model", "calls_paid", "calls_cached", "calls_errored",
           "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "call_seconds", "wall_seconds",
           "cpu_seconds", "started_at"]
_FIELDS = ("calls_paid", "calls_cached", "calls_errored", "prompt_tokens", "completion_tokens",
           "cached_prompt_tokens", "call_seconds")

_lock = threading.Lock()
_counters: dict[str, dict[str, float]] = {}   # model -> field -> total in this process


def record(model: str, outcome: str, prompt_tokens: int | None = None, completion_tokens: int | None = None,
           latency_s: float | None = None) -> None:
    """One call through the cache: outcome `paid`, `cached` or `errored`."""
    with _lock:
        c = _counters.setdefault(str(model), dict.fromkeys(_FIELDS, 0))
        if outcome == "cached":
            c["calls_cached"] += 1
            c["cached_prompt_tokens"] += prompt_tokens or 0
        elif outcome == "paid":
            c["calls_paid"] += 1
            c["prompt_tokens"] += prompt_tokens or 0
            c["completion_tokens"] += completion_tokens or 0
            c["call_seconds"] += latency_s or 0.0
        else:
            c["calls_errored"] += 1
            c["call_seconds"] += latency_s or 0.0


def _snapshot() -> dict[str, dict[str, float]]:
    with _lock:
        return {m: dict(c) for m, c in _counters.items()}


@dataclass
class Meter:
    """The LLM calls and seconds of one stage, from `start()` to `rows()`."""
    benchmark: str
    stage: str
    run_id: str
    _before: dict
    _wall0: float
    _cpu0: float
    _started: float

    @classmethod
    def start(cls, benchmark: str, stage: str, run_id: str) -> "Meter":
        return cls(benchmark, stage, run_id, _snapshot(), time.perf_counter(), time.process_time(), time.time())

    def rows(self) -> pd.DataFrame:
        """One row per model called (one row with model "" where none was): the differences since `start`."""
        now = _snapshot()
        wall, cpu = time.perf_counter() - self._wall0, time.process_time() - self._cpu0
        rows = []
        for model, c in now.items():
            before = self._before.get(model, dict.fromkeys(_FIELDS, 0))
            diff = {f: c[f] - before[f] for f in _FIELDS}
            if any(diff[f] for f in ("calls_paid", "calls_cached", "calls_errored")):
                rows.append({"model": model, **diff})
        if not rows:
            rows = [{"model": "", **dict.fromkeys(_FIELDS, 0)}]
        frame = pd.DataFrame(rows).assign(benchmark=self.benchmark, stage=self.stage, run_id=self.run_id,
                                          wall_seconds=round(wall, 2), cpu_seconds=round(cpu, 2),
                                          started_at=self._started)
        for f in _FIELDS:
            frame[f] = frame[f].astype(float if f == "call_seconds" else "int64")
        return frame[COLUMNS]


def totals(rows: pd.DataFrame) -> dict:
    """The rows summed (the asset metadata's `cost`)."""
    if rows is None or not len(rows):
        return {}
    return {"models": ", ".join(m for m in rows["model"].drop_duplicates() if m) or "none",
            **{f: (round(float(rows[f].sum()), 2) if f == "call_seconds" else int(rows[f].sum())) for f in _FIELDS},
            "wall_seconds": float(rows["wall_seconds"].max()), "cpu_seconds": float(rows["cpu_seconds"].max())}


def ledger_path(base, benchmark: str, stage: str):
    return base / LEDGER / f"{benchmark}--{stage}.parquet"


def append(base, rows: pd.DataFrame) -> None:
    """Add a stage's rows to its (benchmark, stage) file; a re-run of the same run id replaces its rows."""
    for (benchmark, stage), group in rows.groupby(["benchmark", "stage"], sort=False):
        path = ledger_path(base, benchmark, stage)
        old = read_parquet(path) if path.exists() else None
        if old is not None:
            old = old[~old["run_id"].isin(set(group["run_id"]))]
        write_parquet_atomic(pd.concat([old, group], ignore_index=True) if old is not None and len(old) else group,
                             path)


def read_ledger(base, benchmark: str) -> pd.DataFrame:
    """Every stage's rows of `benchmark`, oldest first."""
    folder = base / LEDGER
    frames = [read_parquet(p) for p in sorted(folder.glob(f"{benchmark}--*.parquet"))] if folder.exists() else []
    frames = [f for f in frames if len(f)]
    return (pd.concat(frames, ignore_index=True).sort_values("started_at", kind="stable")
            if frames else pd.DataFrame(columns=COLUMNS))


def latest_by_stage(ledger: pd.DataFrame) -> pd.DataFrame:
    """Each stage's rows of its latest run."""
    if not len(ledger):
        return ledger
    last = ledger.groupby("stage")["started_at"].transform("max")
    return ledger[ledger["started_at"] == last]
