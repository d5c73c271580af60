"""The code-answer sandbox: bubblewrap, an answer process and a grader process of two uids; never in-process.
The escape probes of issue 15 are in test_hardening_sandbox.py."""
from __future__ import annotations

import os
import re
import socket
import textwrap
import threading
from pathlib import Path

import pytest

from causal_assets.core.labeling.sandbox import SandboxResult, bwrap_available, run_doctest, run_pytest

CODE = "def add(a, b):\n    return a + b\n"
PASSING = "from solution import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
FAILING = "from solution import add\n\ndef test_add():\n    assert add(2, 2) == 5\n"

pytestmark = pytest.mark.skipif(not bwrap_available() and not os.environ.get("CI"),
                                reason="bubblewrap not installed (apt-get install -y bubblewrap); CI installs it")


def test_passing_test():
    r = run_pytest(CODE, PASSING)
    assert isinstance(r, SandboxResult)
    assert r.passed and r.returncode == 0 and r.error is None and not r.timed_out
    assert "1 passed" in r.stdout_tail
    assert r.duration_s > 0


def test_failing_assertion_is_a_failure_not_an_infra_error():
    r = run_pytest(CODE, FAILING)
    assert not r.passed and r.returncode == 1 and r.error is None and not r.timed_out
    assert "assert 4 == 5" in r.stdout_tail


def test_broken_answer_is_a_failure_not_an_infra_error():
    r = run_pytest("def add(a, b)\n    return a +\n", PASSING)
    assert not r.passed and r.error is None and r.returncode == 2   # collection error: `import` of it fails
    assert "SyntaxError" in r.stdout_tail


def test_test_code_without_tests_is_an_infra_error():
    r = run_pytest(CODE, "x = 1\n")
    assert not r.passed and r.returncode == 5 and "no tests" in r.error


def test_infinite_loop_killed_by_wall_clock_timeout():
    r = run_pytest("def spin():\n    while True:\n        pass\n",
                   "from solution import spin\n\ndef test_spin():\n    spin()\n", timeout_s=3)
    assert r.timed_out and not r.passed and r.error is None
    assert r.duration_s < 15


def test_sleeping_child_process_group_is_killed():
    code = "import subprocess, sys\ndef go():\n    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n    import time; time.sleep(600)\n"
    r = run_pytest(code, "from solution import go\n\ndef test_go():\n    go()\n", timeout_s=3)
    assert r.timed_out and not r.passed


def test_cpu_limit_kills_busy_loop():
    r = run_pytest("def spin():\n    while True:\n        pass\n",
                   "from solution import spin\n\ndef test_spin():\n    spin()\n", timeout_s=30, cpu_s=2)
    assert not r.passed and not r.timed_out and r.error is None
    assert "killed by signal" in r.stdout_tail   # SIGXCPU/SIGKILL of the answer process, reported by the grader


def test_memory_bomb_is_limited():
    code = "def bomb():\n    return bytearray(2 * 1024 ** 3)\n"
    test = "from solution import bomb\n\ndef test_bomb():\n    assert len(bomb()) == 2 * 1024 ** 3\n"
    r = run_pytest(code, test, memory_mb=256, timeout_s=20)
    assert not r.passed and r.error is None and not r.timed_out
    assert "MemoryError" in r.stdout_tail


@pytest.fixture
def listening_port():
    """A real local listening socket that accepts connections (proves the port is reachable from here)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    accepted: list[object] = []
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                accepted.append(conn)
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    port = srv.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), timeout=5):  # reachable from the host
        pass
    for _ in range(100):  # wait until the server thread has accepted the probe, so counts are stable
        if accepted:
            break
        stop.wait(0.05)
    assert len(accepted) == 1
    yield port, accepted
    stop.set()
    t.join(timeout=2)
    srv.close()


def _net_code(port: int) -> str:
    return textwrap.dedent(f"""
        import socket

        def connect():
            s = socket.create_connection(("127.0.0.1", {port}), timeout=3)
            s.close()
            return True
    """)


_NET_TEST = "from solution import connect\n\ndef test_connect():\n    assert connect() is True\n"


def test_network_blocked_by_default(listening_port):
    port, accepted = listening_port
    n_before = len(accepted)
    r = run_pytest(_net_code(port), _NET_TEST, timeout_s=20)
    assert not r.passed and r.error is None and not r.timed_out
    assert re.search(r"PermissionError|Network is unreachable|OSError|ConnectionRefused", r.stdout_tail)
    assert len(accepted) == n_before  # the listener never saw the sandboxed connection


def test_network_allowed_when_requested(listening_port):
    port, _ = listening_port
    r = run_pytest(_net_code(port), _NET_TEST, allow_network=True)
    assert r.passed, r.stdout_tail


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("CAUSAL_SANDBOX_SECRET", "s3cr3t-value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    code = "import os\n\ndef env():\n    return dict(os.environ)\n"
    test = textwrap.dedent("""
        import os

        from solution import env

        def test_env():
            e = env()
            assert "CAUSAL_SANDBOX_SECRET" not in e and "OPENAI_API_KEY" not in e
            allowed = {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PWD"}
            assert set(e) <= allowed, sorted(set(e) - allowed)
            # each process has its own HOME: the answer's /tmp, the grader's its private directory
            assert e["HOME"] == "/tmp" and os.environ["HOME"] == "/tmp/grader", (e["HOME"], os.environ["HOME"])
    """)
    r = run_pytest(code, test)
    assert r.passed, r.stdout_tail
    assert "s3cr3t" not in r.stdout_tail + r.stderr_tail


def test_temp_dir_is_removed_afterwards():
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob("causal_sandbox_*"))
    r = run_pytest("import os\ndef where():\n    return os.getcwd()\n",
                   "from solution import where\n\ndef test_where():\n    assert where() == '/tmp/work'\n")
    assert r.passed, r.stdout_tail
    assert set(Path(tempfile.gettempdir()).glob("causal_sandbox_*")) <= before


def test_runs_in_separate_process():
    r = run_pytest("import os\ndef pid():\n    return os.getpid()\n",
                   f"from solution import pid\n\ndef test_pid():\n    assert pid() != {os.getpid()}\n")
    assert r.passed


DOC_OK = '''
def square(x):
    """
    >>> square(3)
    9
    >>> square(-2)
    4
    """
    return x * x
'''


def test_doctest_pass():
    r = run_doctest(DOC_OK)
    assert r.passed and r.error is None, r.stdout_tail


def test_doctest_fail():
    r = run_doctest(DOC_OK.replace("return x * x", "return x + x"))
    assert not r.passed and r.returncode == 1 and r.error is None
    assert "expected" in r.stdout_tail


def test_doctest_without_examples_does_not_pass():
    r = run_doctest(CODE)
    assert not r.passed and r.returncode == 5 and r.error is None


def test_answer_exiting_early_does_not_pass():
    r = run_pytest("import os\ndef quit_early():\n    os._exit(0)\n",
                   "from solution import quit_early\n\ndef test_q():\n    quit_early()\n")
    assert not r.passed and r.error is None and "exited with code 0" in r.stdout_tail
