"""How many threads a local model may use: the cores that other processes leave free, measured while it runs.

llama.cpp's worker threads spin-wait on each other, so a thread more than the free cores costs far more than it
brings (labelling runs five times slower beside two busy loops). The 1-minute load average is the wrong gauge
for it: it lags by a minute and counts this process's own recent work, so a labelling step that starts right after
the embedding step sees load ~1.3 on an idle 2-core machine and would run on one thread.

:class:`CoreMeter` reads the machine's CPU time (``/proc/stat``) and this process's own (``getrusage``) and
reports the difference between two readings: the cores *other* processes kept busy in between. Where
``/proc/stat`` does not exist it falls back to the load average.
"""
from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Callable

PROC_STAT = Path("/proc/stat")
FIRST_WINDOW_S = 0.5   # the first reading has no earlier one to compare with: it watches this long


def machine_cpu_seconds(stat: Path = PROC_STAT) -> tuple[float, float] | None:
    """(busy, elapsed) CPU-seconds summed over all cores since boot, or None without ``/proc/stat``."""
    try:
        first = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    ticks = [float(v) for v in first[1:9]]          # user nice system idle iowait irq softirq steal
    hz = float(os.sysconf("SC_CLK_TCK"))
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


def own_cpu_seconds() -> float:
    """CPU time of this process, all its threads (llama.cpp's workers included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def free_from_busy(busy_cores: float, total: int) -> int:
    """Threads to run beside ``busy_cores`` of other work: the free cores, rounded half up, at least 1."""
    return max(1, min(total, int(total - busy_cores + 0.5)))


def free_cores_by_load(total: int | None = None) -> int:
    """The free cores by the 1-minute load average (the fallback where ``/proc/stat`` is missing)."""
    total = total or os.cpu_count() or 1
    try:
        return free_from_busy(os.getloadavg()[0], total)
    except OSError:
        return total


class CoreMeter:
    """Cores kept busy by other processes between two readings (see the module docstring)."""

    def __init__(self, total: int | None = None,
                 machine: Callable[[], tuple[float, float] | None] = machine_cpu_seconds,
                 own: Callable[[], float] = own_cpu_seconds, sleep: Callable[[float], None] = time.sleep):
        self.total = total or os.cpu_count() or 1
        self._machine, self._own, self._sleep = machine, own, sleep
        self._last: tuple[float, float, float] | None = None

    def _reading(self) -> tuple[float, float, float] | None:
        m = self._machine()
        return None if m is None else (m[0], m[1], self._own())

    def others_busy(self) -> float | None:
        """Cores other processes used since the previous call (the first call watches ``FIRST_WINDOW_S``);
        None where the machine's CPU time cannot be read."""
        if self._last is None:
            self._last = self._reading()
            if self._last is None:
                return None
            self._sleep(FIRST_WINDOW_S)
        now = self._reading()
        if now is None:
            return None
        (busy0, all0, own0), (busy1, all1, own1) = self._last, now
        self._last = now
        wall = (all1 - all0) / self.total          # seconds that passed, from the same clock as the busy time
        if wall <= 0:
            return 0.0
        return min(float(self.total), max(0.0, (busy1 - busy0 - (own1 - own0)) / wall))

    def free(self) -> int:
        """Threads this process may run now."""
        busy = self.others_busy()
        return free_cores_by_load(self.total) if busy is None else free_from_busy(busy, self.total)


def free_cores(total: int | None = None) -> int:
    """The cores free right now (one short measurement)."""
    return CoreMeter(total).free()
