"""Progress of long work (embedding thousands of texts): done/total, rate and ETA, one line per report.

The core has no Dagster: an asset passes `context.log.info` (any `Callable[[str], None]`), so the lines land in the
run's event log and the UI. `causal-assets` also shows them on the terminal: it sets `terminal` (a callable) for
the runs it executes in its own process, so a user sees e.g.
`embedding entity descriptions: 4,096/14,596 (28%), 93/s, about 1 min 53 s left`.

* `Progress(total, what, emit)`: `update(done)` reports at most every `every_s` seconds (and always at the end);
* `ProgressLog(log, what)`: a `(done, total)` callback for code that reports through callbacks (the embedding
  loop); the first report after `first_s`, then at most every `interval_s`, and always at the end.
"""
from __future__ import annotations

import time
from typing import Callable

# Set by the CLI for runs it executes in-process: where progress lines go besides the run's log.
terminal: Callable[[str], None] | None = None


def tell(line: str, log: Callable[[str], None] | None = None) -> None:
    """One line to `log` (a run's log) and, for a run a command executes in its own process, to the terminal."""
    for sink in (log, terminal):
        if sink is not None:
            sink(line)


def duration(seconds: float) -> str:
    """A human duration: `45 s`, `3 min 05 s`, `1 h 02 min`."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Progress:
    def __init__(self, total: int, what: str, emit: Callable[[str], None] | None = None, every_s: float = 5.0,
                 unit: str = "/s", started: float | None = None):
        self.total, self.what, self.emit, self.every_s, self.unit = total, what, emit, every_s, unit
        self.t0 = time.monotonic() if started is None else started  # `started`: a time.monotonic() value
        self._last = -1e9
        self.lines: list[str] = []

    def line(self, done: int) -> str:
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        rate = done / elapsed
        text = f"{self.what}: {done:,}/{self.total:,}"
        if self.total:
            text += f" ({done / self.total:.0%})"
        text += f", {rate:,.0f}{self.unit}" if rate >= 10 else f", {rate:.2g}{self.unit}"   # slow work: 0.31/s
        if done >= self.total:
            return text + f", done in {duration(elapsed)}"
        if done and rate > 0:
            text += f", about {duration((self.total - done) / rate)} left"
        return text

    def update(self, done: int) -> None:
        now = time.monotonic()
        if done < self.total and now - self._last < self.every_s:
            return
        self._last = now
        text = self.line(done)
        self.lines.append(text)
        tell(text, self.emit)


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
            tell(self.message(done, total, now - self.start), self.log)


def chain(*callbacks: Callable[[int, int], None] | None) -> Callable[[int, int], None] | None:
    """One (done, total) callback calling every given one (None ones left out); None when there are none."""
    live = [c for c in callbacks if c is not None]
    if not live:
        return None
    return lambda done, total: [c(done, total) for c in live] and None
