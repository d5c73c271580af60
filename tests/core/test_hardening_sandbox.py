"""Issue 15, finding 3: every escape probe of the issue against the bubblewrap sandbox. Each probe is an answer whose
test passes only if the escape worked; the sandbox must grade it as not passed (and the host must be untouched).
On the previous sandbox (subprocess + rlimits + unshare -n, graded from pytest's output) each of them got through."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from causal_assets.core.labeling.sandbox import bwrap_available, check_examples, run_pytest
from causal_assets.core.labeling.validators import SandboxError, code_example

pytestmark = pytest.mark.skipif(not bwrap_available() and not os.environ.get("CI"),
                                reason="bubblewrap not installed (apt-get install -y bubblewrap); CI installs it")


def _run(code: str, test: str, **kw):
    return run_pytest(textwrap.dedent(code), textwrap.dedent(test), **kw)


@pytest.fixture
def listener():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    accepted, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                accepted.append(conn)
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], accepted
    stop.set()
    t.join(timeout=2)
    srv.close()


def test_setns_into_the_parents_network_namespace_fails(listener):
    port, accepted = listener
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
    assert accepted == []   # the host listener never saw a connection


def test_the_parents_environment_is_not_readable(monkeypatch):
    monkeypatch.setenv("CAUSAL_ASSETS_LLM_API_KEY", "sk-hardening-probe-key")
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
    assert "sk-hardening-probe-key" not in r.stdout_tail + r.stderr_tail


def test_host_processes_are_invisible():
    r = _run("""
        import os

        def pids():
            return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        """, f"from solution import pids\n\ndef test_host_visible():\n    assert {os.getpid()} in pids()\n")
    assert not r.passed and r.error is None


@pytest.mark.parametrize("cheat", [
    # prints what the old sandbox graded from
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


def test_a_double_forked_setsid_child_does_not_outlive_the_timeout():
    marker = f"hardening-{uuid.uuid4().hex}"
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
    # nothing of it is left on the host
    time.sleep(0.5)
    left = [d.name for d in Path("/proc").iterdir() if d.name.isdigit() and _uid(d) == 64101]
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


# ------------------------------------------------------------------------ hostile-input probe 4 (A1-A7)
_THEN = ">>> 1 + 2\n3\n"   # an example the answer would pass if its process were still alive
_GARBLE = ("import os\n\ndef garble(data):  # on every descriptor it may write, the protocol pipe included\n"
           "    for fd in range(3, 20):\n        try:\n            os.write(fd, data)\n"
           "        except OSError:\n            pass\n")


@pytest.mark.parametrize("expr, kw", [
    ("__import__('os')._exit(0)", {}),
    ("__import__('os').kill(__import__('os').getpid(), 9)", {}),
    ("__import__('ctypes').string_at(0)", {}),                      # segfault
    ("[0 for _ in iter(int, 1)]", {"cpu_s": 1}),                     # CPU rlimit: SIGXCPU
    ("garble(bytes([255, 10]))", {}),                                # invalid UTF-8
    ("garble(b'{\"ok\": true, \"stdout\": [3]}\\n')", {}),          # well-formed JSON of the wrong shape
])
def test_an_answer_that_kills_or_garbles_its_process_fails_its_examples(expr, kw):
    r = check_examples(_GARBLE, f">>> {expr}\n3\n" + _THEN, timeout_s=30, **kw)
    assert not r.passed and r.error is None and not r.timed_out, r
    assert r.results == {"example[0]": "failed", "example[1]": "failed"}


def test_the_validator_scores_a_self_killing_answer_as_failed():
    gold = '{"imports": "import math", "setup": [], "call": "math.sqrt(9)", "want": "3.0\\n", "print": false}'
    v = code_example("```python\n__import__('os')._exit(0)\n```", gold)   # raised SandboxError before
    assert not v.passed


def test_the_answers_stderr_cannot_raise_an_infrastructure_error():
    say = "__import__('sys').stderr.write(\"No module named 'pytest'\\nNo module named pytest\\nbwrap: x\\n\")"
    r = run_pytest(f"def add(a, b):\n    {say}\n    return 0\n", "from solution import add\n\n"
                   "def test_add():\n    assert add(2, 3) == 5\n")
    assert not r.passed and r.error is None and r.results == {"test_solution.py::test_add": "failed"}, r
    ex = check_examples("\n", f">>> {say}\n3\n")
    assert not ex.passed and ex.error is None, ex


@pytest.mark.parametrize("raise_, passed", [
    ("raise ValueError('bad value')", True),
    ("raise ValueError('other value')", False),
    ("raise RuntimeError('ValueError: bad value')", False),
    ("raise KeyError('ValueError: bad value')", False),
    ("return 'ValueError: bad value'", False),
])
def test_expected_exception_examples_compare_type_and_message_as_doctest(raise_, passed):
    r = check_examples(f"def f(s):\n    {raise_}\n",
                       ">>> f('x')\nTraceback (most recent call last):\n  ...\nValueError: bad value\n")
    assert r.passed is passed and r.error is None, r
    assert ("1 examples passed" in r.stdout_tail) is passed, r.stdout_tail


def test_results_keep_the_answers_truthiness_and_numpy_scalars_compare_as_literals():
    r = _run("""
        import numpy as np

        class Nope:
            def __bool__(self):
                return False

        def is_even(n):
            return np.bool_(n % 2 == 0)

        def check(x):
            return Nope()

        def mean(xs):
            return np.mean(xs)

        def arr():
            return np.array([1, 2])
        """, """
        import pytest
        from solution import arr, check, is_even, mean

        def test_numpy_bool():
            assert is_even(4) and not is_even(3)

        def test_falsy_object():
            assert not check(1)

        def test_numpy_float():
            assert mean([1, 2]) == 1.5

        def test_ambiguous_truth_is_the_answers_error():
            with pytest.raises(ValueError, match="ambiguous"):
                assert arr()
        """)
    assert r.passed and r.error is None and set(r.results.values()) == {"passed"}, r.stdout_tail


@pytest.mark.parametrize("how", ["__import__('os')._exit(0)", "__import__('sys').exit(0)",
                                 "raise KeyboardInterrupt", "raise type('Halt', (BaseException,), {})()"])
def test_a_dead_or_aborting_answer_is_not_an_exception_a_test_expects(how):
    r = run_pytest(f"def f(x):\n    if x < 0:\n        {how}\n    return 2 * x\n", """\
import pytest
from solution import f

def test_ok():
    assert f(2) == 4

def test_negative_rejected():
    with pytest.raises(Exception):
        f(-1)

def test_later():
    assert 1 + 1 == 2
""")
    assert not r.passed and r.error is None, r
    assert r.results == {"test_solution.py::test_ok": "passed", "test_solution.py::test_negative_rejected": "failed",
                         "test_solution.py::test_later": "passed"}   # a failure, and the session went on


def test_files_in_the_sandbox_are_bounded_by_memory_mb():
    r = _run("""
        import os

        def fill(mb):
            block, written = b"x" * (1 << 20), 0
            try:
                for i in range(mb // 16):
                    with open(f"/tmp/f{i}", "wb") as f:
                        for _ in range(16):
                            f.write(block)
                            f.flush()
                            written += 1
            except OSError:
                pass
            st = os.statvfs("/tmp")
            return written, st.f_blocks * st.f_frsize >> 20
        """, "from solution import fill\n\ndef test_fill():\n    written, size = fill(160)\n"
             "    assert written <= 64 and size <= 64, (written, size)\n", memory_mb=64)
    assert r.passed and r.error is None, r.stdout_tail


def test_a_sandbox_that_never_starts_the_grader_is_an_infrastructure_error(tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"   # a hung bubblewrap: the infrastructure failure under test, not the answer's timeout
    fake.write_text("#!/bin/sh\nsleep 100\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    r = check_examples("import math\n", ">>> math.sqrt(9)\n3.0\n", timeout_s=1)
    assert not r.passed and not r.timed_out and "did not start" in (r.error or ""), r
    gold = '{"imports": "import math", "setup": [], "call": "math.sqrt(16)", "want": "4.0\\n", "print": false}'
    with pytest.raises(SandboxError, match="did not start"):
        code_example("`math.sqrt(16)`", gold, timeout_s=1)
