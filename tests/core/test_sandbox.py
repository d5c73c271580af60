"""The code-answer sandbox: bubblewrap, an answer process and a grader process of two uids; never in-process.
Then escape attempts: answers whose test passes only if the escape worked, which the sandbox must grade as not
passed with the host untouched."""
from __future__ import annotations

import os
import re
import socket
import textwrap
import threading

import pytest

from causal_assets.core.sandbox.bubblewrap import SandboxResult, check_examples, run_doctest, run_pytest
from causal_assets.core.labeling.validators import SandboxError, code_example

CODE = "def add(a, b):\n    return a + b\n"
PASSING = "from solution import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
FAILING = "from solution import add\n\ndef test_add():\n    assert add(2, 2) == 5\n"

pytestmark = pytest.mark.system("bubblewrap")


def _run(code: str, test: str, **kw):
    return run_pytest(textwrap.dedent(code), textwrap.dedent(test), **kw)


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


def test_temp_dir_is_removed_afterwards(tmp_path, monkeypatch):
    import tempfile

    # a temp dir of its own: other test processes' sandboxes come and go in the shared one
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    r = run_pytest("import os\ndef where():\n    return os.getcwd()\n",
                   "from solution import where\n\ndef test_where():\n    assert where() == '/tmp/work'\n")
    assert r.passed, r.stdout_tail
    assert list(tmp_path.glob("causal_sandbox_*")) == []


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


# ---- Answers that kill or garble their own process -------------------------------------------------------------
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
    v = code_example("```python\n__import__('os')._exit(0)\n```", gold)   # a failed answer, not a SandboxError
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
