"""Stopping a test's process group: a group slow to honour SIGTERM (or never honouring it) is killed with SIGKILL
after a load-scaled grace period and reported, not an error of the suite."""
from __future__ import annotations

import subprocess
import sys
import time

from tests.dagster.procs import group_alive, shutdown_grace_s, stop_group

IGNORES_TERM = ("import os, signal, subprocess, sys, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
                "print('up', flush=True)\n"
                "time.sleep(600)\n")


def test_a_group_ignoring_sigterm_is_killed_not_an_error():
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout.readline().strip() == "up"
    time.sleep(0.3)
    assert len(group_alive(proc.pid)) == 2
    result = stop_group(proc, grace_s=1.0)           # not an error "did not shut down within 60s"
    assert not result["graceful"] and proc.pid in result["killed"] and len(result["killed"]) == 2
    assert group_alive(proc.pid) == [] and proc.returncode is not None
    assert result["seconds"] < 15


def test_a_well_behaved_group_stops_gracefully():
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "up"
    result = stop_group(proc, grace_s=30)
    assert result["graceful"] and result["killed"] == [] and group_alive(proc.pid) == []


def test_grace_period_grows_with_load():
    assert 60.0 <= shutdown_grace_s() <= 300.0
