"""The orphan guard: a step process (a multiprocessing child, as the multiprocess executor starts
them) stops when its run worker is killed with SIGKILL, instead of writing on as an orphan."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

PARENT = textwrap.dedent("""
    import multiprocessing, os, sys, time
    from pathlib import Path

    def step(out, guard):
        if guard:
            from causal_assets.core.foundation import orphan_guard
            assert orphan_guard.install()
        while True:  # a step that keeps writing
            Path(out).write_text(str(time.time()))
            time.sleep(0.1)

    if __name__ == "__main__":
        ctx = multiprocessing.get_context(sys.argv[3])
        p = ctx.Process(target=step, args=(sys.argv[1], sys.argv[2] == "1"))
        p.start()
        print(p.pid, flush=True)
        time.sleep(600)
""")


def _orphan_keeps_writing(tmp_path: Path, guard: bool, method: str) -> bool:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    out = tmp_path / f"heartbeat_{guard}_{method}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    parent = subprocess.Popen([sys.executable, str(script), str(out), "1" if guard else "0", method],
                              stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 60
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(parent.pid, signal.SIGKILL)   # the run worker dies
    parent.wait(timeout=10)
    time.sleep(3)
    before = out.read_text()
    time.sleep(1)
    alive = out.read_text() != before
    try:
        os.kill(child, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return alive


@pytest.mark.slow  # ~12 s: a real run worker is killed and its step process must notice
def test_step_process_exits_when_its_run_worker_is_killed(tmp_path):
    assert _orphan_keeps_writing(tmp_path, guard=False, method="spawn")   # the fault, as measured
    assert not _orphan_keeps_writing(tmp_path, guard=True, method="spawn")
    assert not _orphan_keeps_writing(tmp_path, guard=True, method="forkserver")


def test_guard_is_a_no_op_in_the_main_process():
    from causal_assets.core.foundation import orphan_guard

    assert orphan_guard.install() is False
