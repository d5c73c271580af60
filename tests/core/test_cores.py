"""llama.cpp's threads follow the cores other processes leave free: measured from CPU time, not from
the load average, which counts this process's own recent work and lags by a minute."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from causal_assets.core.llm.cores import CoreMeter, free_from_busy, machine_cpu_seconds
from causal_assets.core.llm.models import local_scorer
from causal_assets.core.llm.scoring import ScoreRequest



class Readings:
    """Scripted (machine busy, machine elapsed, own) CPU-seconds, as /proc/stat and getrusage would give them."""

    def __init__(self, rows):
        self.rows = list(rows)
        self.i = 0

    def machine(self):
        busy, elapsed, _ = self.rows[self.i]
        return busy, elapsed

    def own(self):
        own = self.rows[self.i][2]
        self.i += 1
        return own


def meter_on(rows, total=2) -> CoreMeter:
    r = Readings(rows)
    return CoreMeter(total, machine=r.machine, own=r.own, sleep=lambda s: None)


def test_this_process_own_work_is_not_counted_as_busy():
    # 2 cores, 10 s: the machine was busy 14 CPU-s, 13 of them this process's (llama.cpp on 2 threads, partly
    # pre-empted): the others used 0.1 core, so both threads stay
    m = meter_on([(100.0, 1000.0, 50.0), (114.0, 1020.0, 63.0)])
    assert m.others_busy() == pytest.approx(0.1)
    m = meter_on([(100.0, 1000.0, 50.0), (114.0, 1020.0, 63.0)])
    assert m.free() == 2


def test_other_work_takes_threads_away_and_gives_them_back():
    # two busy loops (2 cores' worth) beside us -> 1 thread; then they stop -> 2 again
    m = meter_on([(0.0, 0.0, 0.0), (20.0, 20.0, 0.0), (40.0, 40.0, 0.0), (42.0, 60.0, 2.0)])
    assert m.free() == 1        # first reading and the 10-s window: others 2.0 cores
    assert m.free() == 1
    assert m.free() == 2        # others 0 cores in the last window
    assert free_from_busy(0.4, 2) == 2 and free_from_busy(0.6, 2) == 1 and free_from_busy(5.0, 2) == 1


def test_without_proc_stat_the_load_average_decides():
    m = CoreMeter(2, machine=lambda: None, own=lambda: 0.0, sleep=lambda s: None)
    assert m.others_busy() is None
    assert 1 <= m.free() <= 2


@pytest.mark.skipif(machine_cpu_seconds() is None, reason="needs /proc/stat (Linux)")
def test_a_real_busy_process_is_seen():
    meter = CoreMeter()
    meter.others_busy()
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"])
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - t0
    seen = meter.others_busy()
    child_cores = (usage.ru_utime + usage.ru_stime) / wall
    assert status == 0
    # everything else on this shared machine adds to it; the child's own share must be there
    assert seen >= 0.8 * child_cores - 0.05, (seen, child_cores)


@pytest.mark.llm
def test_the_scorer_resizes_its_threads_between_batches_and_scores_the_same(tmp_path):
    scorer = local_scorer("gemma3-270m", None, tmp_path)
    prompts = [ScoreRequest(f"Question {i}: what is the capital of France?\nAnswer:", (" Paris",)) for i in range(2)]
    # the next readings: the other processes take both cores, then none
    scorer._meter = meter_on([(0.0, 0.0, 0.0), (20.0, 20.0, 0.0), (20.0, 40.0, 0.0)])
    busy = scorer.score_many(prompts[:1])[0]
    assert scorer.n_threads == 1
    quiet = scorer.score_many(prompts[:1] + prompts[1:])
    assert scorer.n_threads == 2
    assert scorer.thread_history[-1][1] == 2 and scorer.thread_history[0][0] == 0.0
    assert quiet[0].best == pytest.approx(busy.best, abs=1e-3)   # threads change the speed, not the numbers
