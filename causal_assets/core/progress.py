"""Progress of a long step in its log: items done / total, rate and ETA, at most once per interval.

The core has no Dagster: a step passes its logger's `info` (or any `Callable[[str], None]`) and the core calls the
reporter as work completes. The first report comes after `first_s` (a step that finishes quickly says nothing
until its end), then at most every `interval_s`, and always at the end.
"""
from __future__ import annotations

import time
from typing import Callable


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


class ProgressLog:
    """`reporter(done, total)`: logs "<what>: done/total <unit> (pct), rate <unit>/s, ETA ..." now and then."""

    def __init__(self, log: Callable[[str], None], what: str, unit: str = "items", interval_s: float = 15.0,
                 first_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.log, self.what, self.unit = log, what, unit
        self.interval_s, self.first_s, self.clock = interval_s, first_s, clock
        self.start = clock()
        self.last: float | None = None
        self.reports = 0

    def message(self, done: int, total: int, elapsed: float) -> str:
        rate = done / elapsed if elapsed > 0 else 0.0
        pct = f" ({100 * done / total:.0f}%)" if total else ""
        if done >= total:
            return f"{self.what}: {done}/{total} {self.unit} done in {duration(elapsed)}, {rate:.1f} {self.unit}/s"
        eta = duration((total - done) / rate) if rate > 0 else "unknown"
        return f"{self.what}: {done}/{total} {self.unit}{pct}, {rate:.1f} {self.unit}/s, ETA {eta}"

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        due = now - self.start >= self.first_s if self.last is None else now - self.last >= self.interval_s
        if done >= total or due:
            self.last = now
            self.reports += 1
            self.log(self.message(done, total, now - self.start))


def chain(*callbacks: Callable[[int, int], None] | None) -> Callable[[int, int], None] | None:
    """One (done, total) callback calling every given one (None ones left out); None when there are none."""
    live = [c for c in callbacks if c is not None]
    if not live:
        return None
    return lambda done, total: [c(done, total) for c in live] and None
