"""Escape attempts on the code-answer sandbox: answers whose test passes only if the escape worked (into the parent's
network namespace or environment, the host's processes or files, the grade or the tests, past the timeout or the
process cap), which the sandbox must grade as not passed with the host untouched."""
from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from causal_assets.core.sandbox.bubblewrap import check_examples, run_pytest
from tests.conftest import load_scaled_s
from tests.core.test_sandbox import _run, listening_port  # noqa: F401  (listening_port: a fixture)

pytestmark = pytest.mark.system("bubblewrap")


def test_setns_into_the_parents_network_namespace_fails(listening_port):
    port, accepted = listening_port
    n_before = len(accepted)   # the fixture's own reachability probe
    r = _run(f"""
        import ctypes, os, socket

        def escape():
            libc = ctypes.CDLL(None, use_errno=True)
            for pid in [os.getppid(), 1] + [int(p) for p in os.listdir("/proc") if p.isdigit()]:
                try:
                    fd = os.open(f"/proc/{{pid}}/ns/net", os.O_RDONLY)
                except OSError:
                    continue
                libc.setns(fd, 0)
                try:
                    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
                    return True
                except OSError:
                    pass
            return False
        """, "from solution import escape\n\ndef test_escape():\n    assert escape() is True\n")
    assert not r.passed and r.error is None, r.stdout_tail
    assert len(accepted) == n_before   # the host listener never saw a connection from the sandbox


def test_the_parents_environment_is_not_readable(monkeypatch):
    monkeypatch.setenv("CAUSAL_ASSETS_LLM_API_KEY", "sk-sandbox-secret-key")
    r = _run("""
        import os

        def leak():
            found = []
            for pid in ["self", str(os.getppid()), "1"] + [p for p in os.listdir("/proc") if p.isdigit()]:
                try:
                    found.append(open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
                except OSError:
                    pass
            return "\\n".join(found)
        """, "from solution import leak\n\ndef test_leak():\n    assert 'CAUSAL_ASSETS_LLM_API_KEY' in leak()\n")
    assert not r.passed and r.error is None and "PATH=/usr/local/bin" in r.stdout_tail   # it read its own only
    assert "sk-sandbox-secret-key" not in r.stdout_tail + r.stderr_tail


def test_host_processes_are_invisible():
    r = _run("""
        import os

        def pids():
            return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        """, f"from solution import pids\n\ndef test_host_visible():\n    assert {os.getpid()} in pids()\n")
    assert not r.passed and r.error is None


@pytest.mark.parametrize("cheat", [
    # prints a pytest summary, for a grader that read the answer's output
    "print('1 passed')\nimport sys\nsys.stderr.write('1 passed\\n')",
    # writes a pytest-looking summary wherever it can
    "import os\nfor d in ('/tmp', os.getcwd(), '/sandbox/grader', '/sandbox/task', '/sandbox/ctl'):\n"
    "    try:\n        open(os.path.join(d, 'stdout.txt'), 'w').write('1 passed')\n    except OSError:\n        pass",
    # monkeypatches pytest's reporting and assertion machinery in its own interpreter
    "import _pytest.runner, _pytest.reports\n"
    "_pytest.reports.TestReport.outcome = 'passed'\n"
    "_pytest.runner.call_and_report = lambda item, when, log=True, **kw: None",
    # writes to every file descriptor it can find, hoping for the verdict channel
    "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"exit_code\": 0, \"results\": {\"x\": \"passed\"}}')\n"
    "    except OSError:\n        pass",
])
def test_a_wrong_answer_cannot_forge_its_grade(cheat):
    code = cheat + "\n\ndef add(a, b):\n    return a - b\n"
    r = run_pytest(code, "from solution import add\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    assert not r.passed and r.error is None, r
    assert r.results and set(r.results.values()) <= {"failed", "error"}, r.results


def test_the_answer_cannot_read_the_tests():
    r = _run("""
        import glob

        def peek():
            out = []
            for f in glob.glob("/sandbox/grader/*") + ["/sandbox/grader/test_solution.py", "/sandbox/ctl/grader.json"]:
                try:
                    out.append(open(f).read())
                except OSError:
                    pass
            return "".join(out)
        """, "from solution import peek\n\ndef test_peek():\n    assert 'SECRET_EXPECTED_42' in peek()\n")
    assert not r.passed and r.error is None
    ex = check_examples("def answer():\n    return open('/sandbox/ctl/grader.json').read()\n",
                        ">>> 'SECRET_WANT_7' in answer()\nTrue\n")
    assert not ex.passed and ex.error is None


@pytest.mark.slow
def test_a_double_forked_setsid_child_does_not_outlive_the_timeout():
    marker = f"sandbox-{uuid.uuid4().hex}"
    r = _run(f"""
        import os, time

        def spawn():
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execv("/bin/sleep", ["/bin/sleep", "300"])  # argv marker below
                os._exit(0)
            time.sleep(60)
        MARKER = "{marker}"
        """, "from solution import spawn\n\ndef test_spawn():\n    spawn()\n", timeout_s=4)
    assert r.timed_out and not r.passed
    time.sleep(0.5)
    sleepers = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
                status = (d / "status").read_text()
            except OSError:
                continue
            if cmd[:2] == [b"/bin/sleep", b"300"] and "Uid:\t64101" in status:
                sleepers.append(int(d.name))
    assert sleepers == []


def test_killing_the_parent_does_not_kill_the_caller_or_the_grader():
    r = _run("""
        import os, signal

        def kill_parent():
            for pid in (os.getppid(), 1):  # never -1: on a broken sandbox that would be every process of the host
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            return "still here"
        """, "from solution import kill_parent\n\ndef test_kill():\n    assert kill_parent() == 'nobody'\n")
    # the grader survived to report the (wrong) answer: a verdict, not an infrastructure error
    assert not r.passed and r.error is None and r.results == {"test_solution.py::test_kill": "failed"}
    assert "still here" in r.stdout_tail


def test_a_fork_storm_is_capped():
    r = _run("""
        import os, time

        def storm():
            n = 0
            for _ in range(300):
                try:
                    if os.fork() == 0:
                        time.sleep(30)
                        os._exit(0)
                    n += 1
                except OSError:
                    break
            return n
        """, "from solution import storm\n\ndef test_storm():\n    assert storm() == 300\n", timeout_s=30)
    assert not r.passed and r.error is None and not r.timed_out, r.stdout_tail
    assert "assert 6" in r.stdout_tail or "assert " in r.stdout_tail   # the count it reached (< 300) is shown
    # nothing of it is left on the host: the kernel kills the sandbox's PID namespace when its first process exits,
    # and on a busy machine the 60-odd killed processes take a moment to go (0.5 s was too short beside other work)
    deadline = time.monotonic() + load_scaled_s(5.0)
    while (left := [d.name for d in Path("/proc").iterdir() if d.name.isdigit() and _uid(d) == 64101]) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == []


def _uid(d: Path) -> int | None:
    try:
        for line in (d / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def test_the_host_filesystem_is_not_visible_or_writable():
    # The checkout's files (not its directory: a venv inside the checkout is bound read-only at its own path,
    # so the directories above it exist, empty) must not be visible.
    here = Path(__file__).resolve()
    r = _run(f"""
        import os

        def probe():
            seen = any(os.path.exists(p) for p in ("{here}", "/etc/passwd", "/etc/shadow",
                                                   "{here.parents[2] / 'pyproject.toml'}"))
            try:
                open("{sys.executable}", "ab")
                wrote = True
            except OSError:
                wrote = False
            return seen or wrote
        """, "from solution import probe\n\ndef test_probe():\n    assert probe() is True\n")
    assert not r.passed and r.error is None


def test_networkx_example_checked_outside_the_answer():
    """The use the validator makes of it: the answer writes the call, the benchmark's example checks it."""
    example = ">>> G = nx.path_graph(4)\n>>> nx.shortest_path(G, 0, 3)\n[0, 1, 2, 3]\n"
    good = check_examples("import networkx as nx\n", example)
    assert good.passed and good.error is None, good.stdout_tail
    wrong = check_examples("import networkx as nx\n",
                           ">>> G = nx.path_graph(4)\n>>> nx.shortest_path(G, 0, 2)\n[0, 1, 2, 3]\n")
    assert not wrong.passed and wrong.error is None
