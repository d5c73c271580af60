"""The code-answer sandbox: runs pytest/doctest in a separate, limited process; never in-process."""
from __future__ import annotations

import os
import re
import socket
import textwrap
import threading
from pathlib import Path

import pytest

from causal_assets.core.labeling.sandbox import SandboxResult, run_doctest, run_pytest, unshare_available

CODE = "def add(a, b):\n    return a + b\n"
PASSING = "from solution import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
FAILING = "from solution import add\n\ndef test_add():\n    assert add(2, 2) == 5\n"

ISOLATIONS = ["sitecustomize"] + (["unshare"] if unshare_available() else [])


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
    assert not r.passed and r.error is None and r.returncode == 2
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
    assert not r.passed and not r.timed_out and r.returncode is not None and r.returncode < 0


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


def _net_test(port: int) -> str:
    return textwrap.dedent(f"""
        import socket

        def test_connect():
            s = socket.create_connection(("127.0.0.1", {port}), timeout=3)
            s.close()
    """)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_network_blocked_by_default(listening_port, isolation):
    port, accepted = listening_port
    n_before = len(accepted)
    r = run_pytest(CODE, _net_test(port), timeout_s=20, isolation=isolation)
    assert not r.passed and r.error is None and not r.timed_out
    assert re.search(r"PermissionError|Network is unreachable|OSError|ConnectionRefused", r.stdout_tail)
    assert len(accepted) == n_before  # the listener never saw the sandboxed connection


def test_network_allowed_when_requested(listening_port):
    port, _ = listening_port
    r = run_pytest(CODE, _net_test(port), allow_network=True)
    assert r.passed, r.stdout_tail


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("CAUSAL_SANDBOX_SECRET", "s3cr3t-value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    test = textwrap.dedent("""
        import os

        def test_env():
            assert "CAUSAL_SANDBOX_SECRET" not in os.environ
            assert "OPENAI_API_KEY" not in os.environ
            allowed = {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONPATH"}
            extra = set(os.environ) - allowed - {"PYTEST_CURRENT_TEST", "PYTEST_VERSION"}
            assert not extra, sorted(extra)
            assert "causal_sandbox_" in os.environ["HOME"]
    """)
    r = run_pytest(CODE, test)
    assert r.passed, r.stdout_tail
    assert "s3cr3t" not in r.stdout_tail + r.stderr_tail


def test_temp_dir_is_removed_afterwards():
    test = "import os\n\ndef test_where():\n    assert False, 'CWD=' + os.getcwd() + '=END'\n"
    r = run_pytest(CODE, test)
    assert not r.passed
    m = re.search(r"CWD=(\S+?)=END", r.stdout_tail)
    assert m, r.stdout_tail
    cwd = Path(m.group(1))
    assert "causal_sandbox_" in str(cwd)
    assert not cwd.exists() and not cwd.parent.exists()


def test_runs_in_separate_process():
    r = run_pytest(CODE, f"import os\n\ndef test_pid():\n    assert os.getpid() != {os.getpid()}\n")
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
    assert "Expected" in r.stdout_tail


def test_doctest_without_examples_does_not_pass():
    r = run_doctest(CODE)
    assert not r.passed and r.returncode == 5 and r.error is None


def test_exit_code_zero_without_passing_summary_does_not_pass():
    r = run_pytest("import os\ndef quit_early():\n    os._exit(0)\n",
                   "from solution import quit_early\n\ndef test_q():\n    quit_early()\n    assert False\n")
    assert r.returncode == 0 and not r.passed and r.error is None
