"""Run a solver's code answer against tests in a separate, resource-limited process.

Nothing is ever executed in-process. Each call:

* creates a fresh temp dir ``<root>`` with ``work/`` (cwd: ``solution.py``, ``test_solution.py``, an empty
  ``pytest.ini`` so no outside config/conftest is picked up), ``home/`` (``$HOME``) and the captured
  stdout/stderr files, and removes all of it afterwards;
* runs ``sys.executable -m pytest -q -p no:cacheprovider`` (``run_doctest`` adds ``--doctest-modules`` on
  ``solution.py``) with a scrubbed environment: only ``PATH``, ``HOME`` (temp), ``LANG``,
  ``PYTHONDONTWRITEBYTECODE=1``, ``PYTHONHASHSEED=0`` (plus ``PYTHONPATH`` in the socket fallback below);
* applies rlimits in ``preexec_fn``: ``RLIMIT_AS`` (``memory_mb``), ``RLIMIT_CPU`` (``cpu_s``, hard +1 s),
  ``RLIMIT_NOFILE`` (256), ``RLIMIT_FSIZE`` (64 MB, also bounds captured output) and ``RLIMIT_NPROC`` (256;
  not enforced by the kernel for root, lowered only, never raised);
* starts the child in a new session and, on the wall-clock ``timeout_s``, SIGKILLs the whole process group.

Network (``allow_network=False``):

1. ``unshare --net`` (util-linux) when it works here (probed once with ``unshare -n true``; needs root or
   user namespaces): the child gets an empty network namespace, only a *down* loopback, so every connect
   fails, including to 127.0.0.1 and from C extensions / subprocesses.
2. Fallback (best effort only): a ``sitecustomize.py`` put first on ``PYTHONPATH`` replaces
   ``socket.socket.connect``/``connect_ex``/``sendto``/``sendmsg`` with functions raising ``PermissionError``
   for every non-AF_UNIX socket. Pure Python code is blocked; ctypes, ``_socket`` re-imports or spawned
   non-Python programs are not.

Limits of this sandbox: no filesystem isolation (the child runs as the calling user and can read what it can
read), rlimits are per process. It protects the host from accidents and runaway answers (loops, memory bombs,
fork storms, stray network calls), not from a determined adversary.

``SandboxResult.error`` is set only for *infrastructure* problems (the sandbox could not start, ``unshare``
failed, pytest is missing, pytest usage error, the given tests collected nothing); then ``passed`` is False
and the answer should not be scored. Failures caused by the answer (assertion, exception, syntax/import error
during collection, MemoryError, CPU limit, wall-clock timeout) leave ``error`` as None.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SandboxResult", "run_pytest", "run_doctest", "unshare_available"]

TAIL_CHARS = 4000
_NOFILE = 256
_NPROC = 256
_FSIZE_MB = 64
_SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_SITECUSTOMIZE = '''\
"""Injected by causal_assets sandbox: block network connections (fallback when unshare is unavailable)."""
import socket as _socket

_AF_UNIX = getattr(_socket, "AF_UNIX", None)


for _name in ("connect", "connect_ex", "sendto", "sendmsg"):
    if hasattr(_socket.socket, _name):
        _orig = getattr(_socket.socket, _name)

        def _make(orig, name):
            def guard(self, *args, **kwargs):
                if _AF_UNIX is not None and self.family == _AF_UNIX:
                    return orig(self, *args, **kwargs)
                raise PermissionError(f"network access is disabled in the sandbox (socket.{name})")
            guard.__name__ = name
            return guard

        setattr(_socket.socket, _name, _make(_orig, _name))
'''


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    returncode: int | None
    stdout_tail: str
    stderr_tail: str
    duration_s: float
    timed_out: bool
    error: str | None = None  # infrastructure error (not the answer's fault); None otherwise


@functools.lru_cache(maxsize=1)
def unshare_available() -> bool:
    """True when ``unshare --net`` works on this machine (probed once with ``unshare -n true``)."""
    exe = shutil.which("unshare")
    if not exe:
        return False
    try:
        return subprocess.run([exe, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _limit(resource_mod, which: int, value: int) -> None:
    """Lower soft and hard limit to ``value`` (never above the current hard limit)."""
    soft, hard = resource_mod.getrlimit(which)
    if hard != resource_mod.RLIM_INFINITY:
        value = min(value, hard)
    resource_mod.setrlimit(which, (value, value))


def _preexec(memory_mb: int, cpu_s: int):
    def apply() -> None:  # runs in the child between fork and exec: keep it minimal
        import resource

        if memory_mb:
            _limit(resource, resource.RLIMIT_AS, int(memory_mb) * 1024 * 1024)
        if cpu_s:
            soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
            new_hard = int(cpu_s) + 1 if hard == resource.RLIM_INFINITY else min(int(cpu_s) + 1, hard)
            resource.setrlimit(resource.RLIMIT_CPU, (min(int(cpu_s), new_hard), new_hard))
        _limit(resource, resource.RLIMIT_NOFILE, _NOFILE)
        _limit(resource, resource.RLIMIT_FSIZE, _FSIZE_MB * 1024 * 1024)
        if hasattr(resource, "RLIMIT_NPROC"):
            _limit(resource, resource.RLIMIT_NPROC, _NPROC)
        if hasattr(resource, "RLIMIT_CORE"):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _tail(path: Path, n: int = TAIL_CHARS) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n * 4 :].decode("utf-8", errors="replace")[-n:]


def _run(
    files: dict[str, str],
    pytest_args: list[str],
    *,
    timeout_s: float,
    memory_mb: int,
    cpu_s: int,
    allow_network: bool,
    no_tests_is_error: bool,
    isolation: str,
) -> SandboxResult:
    if isolation not in ("auto", "unshare", "sitecustomize"):
        raise ValueError(f"isolation must be 'auto', 'unshare' or 'sitecustomize', got {isolation!r}")
    start = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="causal_sandbox_"))

    def infra(msg: str, rc: int | None = None, out: str = "", err: str = "") -> SandboxResult:
        return SandboxResult(False, rc, out, err, time.monotonic() - start, False, msg)

    try:
        work, home, sitedir = root / "work", root / "home", root / "site"
        for d in (work, home):
            d.mkdir()
        (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        for name, text in files.items():
            (work / name).write_text(text, encoding="utf-8")

        env = {
            "PATH": _SAFE_PATH,
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
        }
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={work}", *pytest_args]
        use_unshare = False
        if not allow_network:
            if isolation == "unshare" or (isolation == "auto" and unshare_available()):
                if not unshare_available():
                    return infra("network isolation 'unshare' requested but `unshare -n true` does not work")
                use_unshare = True
                cmd = [shutil.which("unshare") or "unshare", "--net", "--", *cmd]
            else:
                sitedir.mkdir()
                (sitedir / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
                env["PYTHONPATH"] = str(sitedir)

        out_path, err_path = root / "stdout.txt", root / "stderr.txt"
        timed_out = False
        with open(out_path, "wb") as out_f, open(err_path, "wb") as err_f:
            try:
                proc = subprocess.Popen(
                    cmd,
                    cwd=work,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out_f,
                    stderr=err_f,
                    start_new_session=True,
                    preexec_fn=_preexec(memory_mb, cpu_s),
                    close_fds=True,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return infra(f"sandbox could not start: {type(exc).__name__}: {exc}")
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid)
                try:
                    rc = proc.wait(timeout=10)
                except subprocess.TimeoutExpired:  # pragma: no cover - unkillable child
                    rc = None
            finally:
                _kill_group(proc.pid)  # leftovers (background children) of a finished run
        duration = time.monotonic() - start
        out, err = _tail(out_path), _tail(err_path)

        error = None
        if not timed_out and rc is not None:
            if use_unshare and rc != 0 and "unshare:" in err and "pytest" not in out:
                error = f"unshare failed: {err.strip().splitlines()[-1] if err.strip() else rc}"
            elif "No module named pytest" in err:
                error = f"pytest is not importable by {sys.executable}"
            elif rc == 4 and "ERROR:" in err:
                error = f"pytest usage error: {err.strip().splitlines()[-1]}"
            elif rc == 5 and no_tests_is_error and "no tests ran" in out:
                error = "the test code collected no tests"
        return SandboxResult(
            # exit code 0 alone is not enough: an answer calling os._exit(0) mid-test must not pass
            passed=(rc == 0 and not timed_out and error is None and _summary_passed(out)),
            returncode=rc,
            stdout_tail=out,
            stderr_tail=err,
            duration_s=duration,
            timed_out=timed_out,
            error=error,
        )
    except OSError as exc:
        return infra(f"sandbox could not prepare its temp dir: {type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


_PASSED = re.compile(r"\b\d+ passed\b")
_BAD = re.compile(r"\b\d+ (failed|errors?)\b")


def _summary_passed(out: str) -> bool:
    """pytest's final summary line reports passes and neither failures nor errors."""
    lines = [l for l in out.strip().splitlines() if l.strip()]
    last = lines[-1] if lines else ""
    return bool(_PASSED.search(last)) and not _BAD.search(last)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_pytest(
    code: str,
    test_code: str,
    timeout_s: float = 20,
    memory_mb: int = 512,
    cpu_s: int = 20,
    allow_network: bool = False,
    *,
    module_name: str = "solution",
    isolation: str = "auto",
) -> SandboxResult:
    """Write ``code`` to ``<module_name>.py`` and ``test_code`` to ``test_<module_name>.py`` and run pytest.

    The tests import the answer with ``from solution import ...``. ``isolation`` picks the network block
    ("auto": unshare if it works, else the sitecustomize fallback); it is ignored when ``allow_network``.
    """
    if not module_name.isidentifier():
        raise ValueError(f"module_name must be a Python identifier, got {module_name!r}")
    test_file = f"test_{module_name}.py"
    return _run(
        {f"{module_name}.py": code, test_file: test_code},
        [test_file],
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        cpu_s=cpu_s,
        allow_network=allow_network,
        no_tests_is_error=True,
        isolation=isolation,
    )


def run_doctest(
    code: str,
    timeout_s: float = 20,
    memory_mb: int = 512,
    cpu_s: int = 20,
    allow_network: bool = False,
    *,
    module_name: str = "solution",
    isolation: str = "auto",
) -> SandboxResult:
    """Run the doctests embedded in ``code`` (``pytest --doctest-modules``) under the same sandbox.

    Code without any doctest example does not pass (pytest exit code 5) but is not an infrastructure error:
    the examples are part of the answer being checked.
    """
    if not module_name.isidentifier():
        raise ValueError(f"module_name must be a Python identifier, got {module_name!r}")
    return _run(
        {f"{module_name}.py": code},
        ["--doctest-modules", f"{module_name}.py"],
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        cpu_s=cpu_s,
        allow_network=allow_network,
        no_tests_is_error=False,
        isolation=isolation,
    )
