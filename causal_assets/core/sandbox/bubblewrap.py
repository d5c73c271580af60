"""Run a solver's code answer against tests in a bubblewrap sandbox; nothing of the answer ever runs in-process.

`run_pytest`, `run_doctest` and `check_examples` start `bwrap` with fresh pid, network, IPC and UTS namespaces, a
read-only `/usr` and Python installation, a `/tmp` tmpfs of `memory_mb`, an empty environment and
`--die-with-parent`. Inside, `_sandbox_launcher.py` runs the answer and the grader as two unprivileged uids: the
verdict comes through a pipe only the grader holds, never from anything the answer can write, and the host kills the
sandbox's process group at `timeout_s`. `SandboxResult.error` is set only for infrastructure problems (bubblewrap
missing or failing, no verdict without a timeout); an answer's own failures leave it None. Guarantees and limits:
docs/security.md ("Code sandbox").
"""
from __future__ import annotations

import ast
import doctest
import functools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SandboxResult", "run_pytest", "run_doctest", "check_examples", "bwrap_available",
           "unshare_available", "SandboxUnavailable"]

TAIL_CHARS = 4000
ANSWER_UID = 64_101   # no passwd entry needed; only the answer's processes ever run as this uid
GRADER_UID = 64_100
NPROC = 64
_NOFILE = 256
_FSIZE_MB = 64
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# The whole environment of the sandboxed processes (bwrap --clearenv): the grader's HOME is its own directory
# (`grader_home`), the answer's /tmp; the launcher gives the answer process its environment explicitly.
SANDBOX_ENV = {"PATH": _SAFE_PATH, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
_LAUNCHER = Path(__file__).with_name("_launcher.py")
_MAX_VERDICT = 4 << 20
_READY = b"R"  # the launcher's READY: its first byte on the verdict pipe, written before the answer starts


class SandboxUnavailable(RuntimeError):
    """bubblewrap is not installed or cannot create namespaces here."""


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    returncode: int | None
    stdout_tail: str
    stderr_tail: str
    duration_s: float
    timed_out: bool
    error: str | None = None  # infrastructure error (not the answer's fault); None otherwise
    results: dict | None = None  # per test / example: passed | failed | error | skipped (from the grader)


def _bwrap() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def bwrap_available() -> bool:
    """True when bubblewrap runs here with the namespaces the sandbox needs (probed once)."""
    exe = _bwrap()
    if not exe or os.geteuid() != 0 and not _userns_ok():
        return False
    try:
        probe = subprocess.run([exe, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                                "--ro-bind", "/", "/", "--proc", "/proc", "--", "true"],
                               capture_output=True, timeout=20)
        return probe.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _userns_ok() -> bool:
    try:
        return int(Path("/proc/sys/user/max_user_namespaces").read_text()) > 0
    except (OSError, ValueError):
        return False


def unshare_available() -> bool:
    """Kept for callers of the previous sandbox: True when the bubblewrap sandbox is available."""
    return bwrap_available()


def _tail(path: Path, n: int = TAIL_CHARS) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n * 4:].decode("utf-8", errors="replace")[-n:]


def _python_roots() -> list[str]:
    """Directories the sandbox's Python needs, read-only: base prefix, prefix (a venv), and where the interpreter
    binary really lives."""
    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix),
             os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    return sorted(r for r in roots if not r.startswith("/usr/") and r != "/usr")


def _preexec(nofile: int, fsize_mb: int):
    def apply() -> None:  # in the child between fork and exec of bwrap (root): limits every sandboxed process gets
        for which, value in ((resource.RLIMIT_NOFILE, nofile), (resource.RLIMIT_FSIZE, fsize_mb << 20),
                             (resource.RLIMIT_CORE, 0)):
            soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))

    return apply


def _write(path: Path, text: str, mode: int, uid: int | None = None) -> None:
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, uid)


def _run(mode: str, answer: str, *, test_code: str | None = None, examples: list[dict] | None = None,
         module_name: str, timeout_s: float, memory_mb: int, cpu_s: int, allow_network: bool,
         no_tests_is_error: bool) -> SandboxResult:
    start = time.monotonic()

    def infra(msg: str, rc: int | None = None, out: str = "", err: str = "") -> SandboxResult:
        return SandboxResult(False, rc, out, err, time.monotonic() - start, False, msg)

    if not module_name.isidentifier():
        raise ValueError(f"module_name must be a Python identifier, got {module_name!r}")
    exe = _bwrap()
    if exe is None:
        return infra("bubblewrap (bwrap) is not installed: apt-get install -y bubblewrap (the sandbox never runs "
                     "code without it)")
    if os.geteuid() != 0:
        return infra("the sandbox needs root to run the answer and the grader as two unprivileged uids")
    root = Path(tempfile.mkdtemp(prefix="causal_sandbox_"))
    os.chmod(root, 0o755)
    verdict_r = verdict_w = None
    try:
        ctl, task, grader = root / "ctl", root / "task", root / "grader"
        for d, m in ((ctl, 0o755), (task, 0o755), (grader, 0o700)):
            d.mkdir()
            os.chmod(d, m)
        os.chown(grader, GRADER_UID, GRADER_UID)
        shutil.copyfile(_LAUNCHER, ctl / "launcher.py")
        os.chmod(ctl / "launcher.py", 0o644)
        _write(task / f"{module_name}.py", answer, 0o644)
        test_file = f"test_{module_name}.py"
        if test_code is not None:
            _write(grader / test_file, test_code, 0o600, GRADER_UID)
            _write(grader / "pytest.ini", "[pytest]\n", 0o600, GRADER_UID)
        verdict_r, verdict_w = os.pipe()
        worker_cfg = {"module": module_name, "task_dir": "/sandbox/task", "workdir": "/tmp/work"}
        cfg = {**worker_cfg, "mode": mode, "launcher": "/sandbox/ctl/launcher.py",
               "worker_config": "/sandbox/ctl/worker.json", "tests_dir": "/sandbox/grader", "test_file": test_file,
               "examples": examples or [], "grader_home": "/tmp/grader", "answer_uid": ANSWER_UID,
               "grader_uid": GRADER_UID, "memory_mb": memory_mb, "cpu_s": cpu_s, "nproc": NPROC,
               "verdict_fd": verdict_w, "answer_env": {**SANDBOX_ENV, "HOME": "/tmp"}}
        _write(ctl / "worker.json", json.dumps(worker_cfg), 0o644)
        _write(ctl / "grader.json", json.dumps(cfg), 0o600)   # examples' expected outputs: root only

        cmd = [exe, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent", "--new-session", "--clearenv",
               "--ro-bind", "/usr", "/usr"]
        if not allow_network:
            cmd.append("--unshare-net")
        for link in ("lib", "lib64", "bin", "sbin"):
            target = Path("/") / link
            if target.is_symlink():
                cmd += ["--symlink", os.readlink(target), f"/{link}"]
            elif target.is_dir():
                cmd += ["--ro-bind", str(target), f"/{link}"]
        made: set[str] = set()
        for r in _python_roots():
            for parent in reversed(Path(r).parents[:-1]):  # bwrap would make missing parents 0700 (root only)
                if str(parent) not in made and not str(parent).startswith("/usr"):
                    made.add(str(parent))
                    cmd += ["--perms", "0755", "--dir", str(parent)]
            cmd += ["--ro-bind", r, r]
        if allow_network:
            for f in ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf"):
                cmd += ["--ro-bind-try", f, f]
        # /tmp is the only place the answer can write: a tmpfs is memory RLIMIT_AS does not count, so bound it
        cmd += ["--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", str(memory_mb << 20), "--tmpfs", "/tmp",
                "--dir", "/sandbox", "--ro-bind", str(ctl), "/sandbox/ctl", "--ro-bind", str(task), "/sandbox/task",
                "--ro-bind", str(grader), "/sandbox/grader", "--chdir", "/",
                *[a for k, v in {**SANDBOX_ENV, "HOME": cfg["grader_home"]}.items() for a in ("--setenv", k, v)],
                "--", os.path.realpath(sys.executable), "-I", "/sandbox/ctl/launcher.py", "grade",
                "/sandbox/ctl/grader.json"]

        out_path, err_path = root / "stdout.txt", root / "stderr.txt"
        timed_out = False
        chunks: list[bytes] = []

        def read_verdict() -> None:
            size = 0
            while True:
                data = os.read(verdict_r, 65536)
                if not data:
                    return
                size += len(data)
                if size <= _MAX_VERDICT:
                    chunks.append(data)

        with open(out_path, "wb") as out_f, open(err_path, "wb") as err_f:
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out_f, stderr=err_f,
                                        start_new_session=True, pass_fds=(verdict_w,),
                                        preexec_fn=_preexec(_NOFILE, _FSIZE_MB))
            except (OSError, subprocess.SubprocessError) as exc:
                return infra(f"sandbox could not start: {type(exc).__name__}: {exc}")
            os.close(verdict_w)
            verdict_w = None
            reader = threading.Thread(target=read_verdict, daemon=True)
            reader.start()
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                rc = None
            finally:
                _kill_group(proc.pid)  # bwrap dies, its pid namespace takes every sandboxed process with it
                try:
                    rc2 = proc.wait(timeout=10)
                    rc = rc if rc is not None else rc2
                except subprocess.TimeoutExpired:  # pragma: no cover - unkillable child
                    pass
            reader.join(timeout=10)
        duration = time.monotonic() - start
        out, err = _tail(out_path), _tail(err_path)
        data = b"".join(chunks)
        if timed_out:
            if not data.startswith(_READY):  # the grader never started: the sandbox hung, not the answer
                return infra(f"the sandbox did not start the grader within {timeout_s}s", rc, out, err)
            return SandboxResult(False, rc, out, err, duration, True, None)
        try:
            verdict = json.loads(data.removeprefix(_READY).decode("utf-8")) if data else None
        except ValueError:
            verdict = None
        if not isinstance(verdict, dict):
            if "bwrap:" in err:
                return infra(f"bubblewrap failed: {err.strip().splitlines()[-1]}", rc, out, err)
            return infra(f"the grader returned no verdict (exit code {rc})", rc, out, err)
        results = verdict.get("results") or {}
        error = None
        # infrastructure errors come from the grader's pipe only (pytest not importable included), never from
        # output the answer can write
        if verdict.get("infra_error"):
            error = f"grader error: {verdict['infra_error']}"
        elif verdict.get("usage_error"):
            error = f"pytest usage error: {(out.strip().splitlines() or [''])[-1]}"
        elif verdict.get("no_tests") and no_tests_is_error:
            error = "the test code collected no tests"
        passed = (error is None and bool(results) and all(v in ("passed", "skipped") for v in results.values())
                  and any(v == "passed" for v in results.values()) and verdict.get("exit_code") == 0)
        return SandboxResult(passed, rc, out, err, duration, False, error, results)
    except OSError as exc:
        return infra(f"sandbox could not prepare its temp dir: {type(exc).__name__}: {exc}")
    finally:
        for fd in (verdict_r, verdict_w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        shutil.rmtree(root, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_pytest(code: str, test_code: str, timeout_s: float = 20, memory_mb: int = 512, cpu_s: int = 20,
               allow_network: bool = False, *, module_name: str = "solution",
               isolation: str = "bwrap") -> SandboxResult:
    """Grade ``code`` (the module ``<module_name>``) with the pytest tests ``test_code``, which import it as usual
    (``from solution import add``); calls reach the answer through the worker (see the module docstring)."""
    _check_isolation(isolation)
    return _run("pytest", code, test_code=test_code, module_name=module_name, timeout_s=timeout_s,
                memory_mb=memory_mb, cpu_s=cpu_s, allow_network=allow_network, no_tests_is_error=True)


def _examples(text: str) -> list[dict]:
    parser = doctest.DocTestParser()
    out = []
    for ex in parser.get_examples(text):
        item = {"source": ex.source, "want": ex.want}
        if ex.exc_msg is not None:
            item["exc_msg"] = ex.exc_msg
        out.append(item)
    return out


def run_doctest(code: str, timeout_s: float = 20, memory_mb: int = 512, cpu_s: int = 20,
                allow_network: bool = False, *, module_name: str = "solution",
                isolation: str = "bwrap") -> SandboxResult:
    """Run the doctest examples in the docstrings of ``code``: the examples are read here (parsed, never run), each
    is executed by the worker in the answer's namespace and its output checked by the grader. Code without any
    example does not pass but is not an infrastructure error."""
    _check_isolation(isolation)
    try:
        tree = ast.parse(code)
        docs = [ast.get_docstring(n, clean=False) or "" for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        docs = []  # the worker reports the syntax error as the answer's failure
    examples = [e for d in docs for e in _examples(d)]
    if not examples:
        return SandboxResult(False, 5, "no doctest examples in the code", "", 0.0, False, None, {})
    return _run("examples", code, examples=examples, module_name=module_name, timeout_s=timeout_s,
                memory_mb=memory_mb, cpu_s=cpu_s, allow_network=allow_network, no_tests_is_error=False)


def check_examples(code: str, examples: str, timeout_s: float = 20, memory_mb: int = 512, cpu_s: int = 20, *,
                   module_name: str = "solution") -> SandboxResult:
    """Grade ``code`` with doctest ``examples`` given by the caller (``>>> expr`` / expected output): the answer
    never sees the expected outputs. E.g. code = "import networkx as nx", examples =
    ">>> G = nx.path_graph(4)\\n>>> nx.shortest_path(G, 0, 3)\\n[0, 1, 2, 3]\\n"."""
    parsed = _examples(examples)
    if not parsed:
        raise ValueError("check_examples: no `>>>` example in `examples`")
    return _run("examples", code, examples=parsed, module_name=module_name, timeout_s=timeout_s,
                memory_mb=memory_mb, cpu_s=cpu_s, allow_network=False, no_tests_is_error=True)


def _check_isolation(isolation: str) -> None:
    if isolation not in ("bwrap", "auto"):
        raise ValueError(f"isolation must be 'bwrap' (the only sandbox; 'auto' means the same), got {isolation!r}")
