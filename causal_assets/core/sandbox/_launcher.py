"""Runs INSIDE the bubblewrap sandbox (stdlib only; see sandbox.py for the host side). Never imported by the project.

    python -I launcher.py grade CONFIG.json     as root in the sandbox: starts the worker, drops to the grader uid, grades
    python -I launcher.py worker CONFIG.json    the worker: runs the answer's code as the answer uid, answers RPCs

Two processes, two uids. The *worker* (ANSWER_UID, no capabilities, no_new_privs, rlimits) imports the answer and
executes what the grader asks over a pipe, sending back data only (reprs parsed with ast.literal_eval, or text).
The *grader* (GRADER_UID) runs the tests or examples against proxies of the answer's names and writes the verdict
to a descriptor inherited from the host, which the worker does not have. The worker cannot read the tests, signal
or trace the grader, or write the verdict.
"""
import ast
import builtins
import ctypes
import io
import json
import os
import resource
import signal
import sys
import traceback

MAX_MESSAGE = 1 << 20  # one RPC answer, in characters
PR_SET_NO_NEW_PRIVS = 38
READY = b"R"  # the grader's first byte on the verdict pipe: the sandbox started (sandbox.py tells a hang from it)
_LITERALS = (bool, int, float, complex, str, bytes)


def _no_new_privs() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    except Exception:  # pragma: no cover - documented: bwrap sets it too for unprivileged runs
        pass


def _drop(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    _no_new_privs()


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


# ---------------------------------------------------------------------------------------------------- the worker
def _error(e: BaseException) -> dict:
    """An exception of the answer as data; `exception` tells the grader whether a test may catch it as an
    Exception (SystemExit, KeyboardInterrupt are not)."""
    return {"ok": False, "error": type(e).__name__, "message": str(e)[:2000], "exception": isinstance(e, Exception),
            "exception_only": traceback.format_exception_only(type(e), e)[-1][-2000:]}  # doctest's "Type: msg"


def _scalar(value):
    """A numpy-style scalar as the Python literal its `.item()` gives when that is lossless (np.float64(1.5) -> 1.5,
    np.bool_(False) -> False); anything else unchanged."""
    try:
        if type(value) not in _LITERALS and getattr(value, "ndim", 0) == 0 and callable(getattr(value, "item", None)):
            item = value.item()
            if type(item) in _LITERALS and bool(item == value):
                return item
    except Exception:
        pass
    return value


def _result(value) -> dict:
    """A return value as data: its repr (the grader rebuilds literals from it) and its own truthiness, computed
    here because the grader never runs the answer's objects (an exception in `__bool__` is carried too)."""
    value = _scalar(value)
    out = {"ok": True, "repr": repr(value)[:MAX_MESSAGE], "callable": callable(value)}
    try:
        out["truth"] = bool(value)
    except BaseException as e:  # noqa: BLE001 - the answer's failure, raised where the test asks for truth
        out["truth_error"] = _error(e)
    return out


def worker(cfg: dict) -> None:
    """The answer's side: stdin/stdout carry one JSON message per line. Runs as the answer uid."""
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # the answer's own prints go to stderr (kept by the host, never graded)
    os.chdir(cfg["workdir"])
    sys.path[:0] = [cfg["task_dir"]]
    module, import_error = None, None
    try:
        import importlib  # one script, two processes: each side imports only what it needs

        module = importlib.import_module(cfg["module"])
    except BaseException as e:  # the answer's fault: every call reports it
        import_error = f"{type(e).__name__}: {e}"
    namespace = dict(vars(module)) if module is not None else {}

    def reply(obj: dict) -> None:
        text = json.dumps(obj)
        if len(text) > MAX_MESSAGE:
            text = json.dumps({"ok": False, "error": "ResultTooLarge", "message": f"{len(text)} characters"})
        proto_out.write(text + "\n")
        proto_out.flush()

    for line in proto_in:
        try:
            req = json.loads(line)
        except ValueError:
            break
        if import_error is not None and req.get("op") in ("call", "get", "exec"):
            reply({"ok": False, "error": "ImportError", "message": f"the answer does not import: {import_error}"})
            continue
        captured = io.StringIO()
        real_stdout = sys.stdout
        try:
            sys.stdout = captured
            if req["op"] == "call":
                fn = getattr(module, req["name"])
                args = ast.literal_eval(req["args"])
                kwargs = ast.literal_eval(req["kwargs"])
                reply({**_result(fn(*args, **kwargs)), "stdout": captured.getvalue()[-4000:]})
            elif req["op"] == "get":
                reply({**_result(getattr(module, req["name"])), "stdout": ""})
            elif req["op"] == "exec":  # one doctest example, in the answer module's namespace
                code = compile(req["source"], "<example>", "single", dont_inherit=True)
                exec(code, namespace)
                reply({"ok": True, "stdout": captured.getvalue()[-MAX_MESSAGE:]})
            else:
                reply({"ok": False, "error": "ProtocolError", "message": f"unknown op {req.get('op')!r}"})
        except BaseException as e:  # noqa: BLE001 - reported to the grader as the answer's failure
            sys.stdout = real_stdout
            reply({**_error(e), "stdout": captured.getvalue()[-4000:]})
        finally:
            sys.stdout = real_stdout


# ---------------------------------------------------------------------------------------------------- the grader
class RemoteError(Exception):
    """An Exception raised by the answer that is not rebuilt as its builtin type (its type name and message)."""


class AnswerAborted(BaseException):
    """The answer process died, broke the protocol, or raised a BaseException that is not an Exception (SystemExit,
    KeyboardInterrupt). Not an Exception, so `pytest.raises(Exception)` cannot take it for the error a test expects;
    pytest records it as the test's failure and goes on (it re-raises only KeyboardInterrupt and its own Exit)."""


class _Remote:
    def __init__(self, cfg: dict):
        import subprocess  # one script, two processes: each side imports only what it needs

        self.proc = subprocess.Popen(
            [sys.executable, "-I", cfg["launcher"], "worker", cfg["worker_config"]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,  # bytes: the answer may write anything
            preexec_fn=lambda: self._as_answer(cfg), close_fds=True, cwd="/", env=cfg["answer_env"])
        self.dead: str | None = None

    @staticmethod
    def _as_answer(cfg: dict) -> None:
        os.setsid()
        _limit(resource.RLIMIT_AS, int(cfg["memory_mb"]) * 1024 * 1024)
        cpu = int(cfg["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        _limit(resource.RLIMIT_NPROC, int(cfg["nproc"]))
        _drop(int(cfg["answer_uid"]))

    def ask(self, req: dict) -> dict:
        if self.dead:
            raise AnswerAborted(self.dead)
        try:
            self.proc.stdin.write(json.dumps(req).encode() + b"\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline(MAX_MESSAGE + 1000)
        except OSError:
            line = b""
        if not line.endswith(b"\n"):
            rc = self.proc.poll() if self.proc.poll() is not None else self._wait()
            self._abort(f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exited with code {rc}")
        try:
            msg = json.loads(line.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError included
            msg = None
        if not isinstance(msg, dict):
            self._abort("broke the protocol")
        return msg

    def _abort(self, why: str):
        """From here on every call fails: the process is gone, or its replies cannot be trusted to be in step."""
        self.dead = f"the answer process {why}"
        for pipe in (self.proc.stdin, self.proc.stdout):  # the worker ends at EOF (the grader's uid cannot kill it)
            try:
                pipe.close()
            except OSError:
                pass
        raise AnswerAborted(self.dead)

    def _wait(self):
        try:
            return self.proc.wait(timeout=2)
        except Exception:
            return None


def _value(msg: dict):
    """The answer's return value rebuilt from its repr (literal types only); other objects compare by repr."""
    text = msg.get("repr", "")
    try:
        return ast.literal_eval(text)
    except Exception:  # not a literal (an object, a graph, ...): an opaque stand-in
        return Opaque(text, msg)


class Opaque:
    """A non-literal result: its repr, and its truthiness as the answer's process computed it."""

    def __init__(self, text: str, msg: dict):
        self.text = text
        self.truth, self.truth_error = msg.get("truth", True), msg.get("truth_error")

    def __repr__(self) -> str:
        return self.text

    def __bool__(self) -> bool:
        if self.truth_error:
            _raise(self.truth_error)
        return bool(self.truth)

    def __eq__(self, other) -> bool:
        return repr(other) == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def _raise(msg: dict):
    name = msg.get("error", "RemoteError")
    text = msg.get("message", "")
    if not msg.get("exception", True):
        raise AnswerAborted(f"the answer raised {name}: {text}")
    exc_type = getattr(builtins, name, None)
    if isinstance(exc_type, type) and issubclass(exc_type, Exception):
        try:
            raise exc_type(text)
        except TypeError:
            pass
    raise RemoteError(f"{name}: {text}")


def _proxy_module(name: str, remote: _Remote):
    import types  # one script, two processes: each side imports only what it needs

    mod = types.ModuleType(name)

    class Function:
        def __init__(self, attr):
            self.attr = attr

        def __call__(self, *args, **kwargs):
            msg = remote.ask({"op": "call", "name": self.attr, "args": repr(args), "kwargs": repr(kwargs)})
            if not msg.get("ok"):
                _raise(msg)
            return _value(msg)

        def __repr__(self):
            return f"<answer function {self.attr}>"

    def getattr_(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        msg = remote.ask({"op": "get", "name": attr})
        if not msg.get("ok"):
            if msg.get("error") == "AttributeError":
                raise AttributeError(msg.get("message"))
            _raise(msg)
        return Function(attr) if msg.get("callable") else _value(msg)

    mod.__getattr__ = getattr_
    return mod


def _grade_pytest(cfg: dict, remote: _Remote) -> dict:
    import pytest  # the grader only: the worker (the answer's process) never loads pytest

    sys.modules[cfg["module"]] = _proxy_module(cfg["module"], remote)
    results: dict[str, str] = {}

    class Collect:
        def pytest_runtest_logreport(self, report):
            if report.when == "call" or report.outcome != "passed":
                if results.get(report.nodeid) in ("failed", "error"):
                    return
                results[report.nodeid] = report.outcome if report.when == "call" else (
                    "error" if report.outcome == "failed" else report.outcome)

        def pytest_collectreport(self, report):
            if report.outcome == "failed":
                results[report.nodeid or "<collection>"] = "error"

    rc = pytest.main(["-q", "-p", "no:cacheprovider", f"--rootdir={cfg['tests_dir']}",
                      "-c", os.path.join(cfg["tests_dir"], "pytest.ini"),
                      os.path.join(cfg["tests_dir"], cfg["test_file"])], plugins=[Collect()])
    rc = int(rc)
    return {"mode": "pytest", "exit_code": rc, "results": results,
            "no_tests": rc == 5, "usage_error": rc in (3, 4)}


def _grade_examples(cfg: dict, remote: _Remote) -> dict:
    """Doctest examples (from the answer's docstrings, or given by the benchmark), each executed by the worker and
    checked here with doctest's OutputChecker."""
    import doctest  # one script, two processes: each side imports only what it needs

    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    results, report = {}, []
    for i, ex in enumerate(cfg["examples"]):
        try:
            msg = remote.ask({"op": "exec", "source": ex["source"]})
        except AnswerAborted as e:  # the answer's failure (this example and the next ones), not the grader's
            msg = {"ok": False, "aborted": True, "exception_only": f"{e}\n"}
        want_exc = ex.get("exc_msg")
        # str(): the answer's process may write any JSON to the pipe, and its malformed reply is its failure
        if msg.get("ok"):
            got = str(msg.get("stdout", ""))
            ok = want_exc is None and checker.check_output(ex["want"], got, flags)
        else:  # as doctest: the "Type: msg" line of the raised exception against the expected one
            got = str(msg.get("exception_only") or f"{msg.get('error')}: {msg.get('message')}\n")
            ok = want_exc is not None and not msg.get("aborted") and checker.check_output(want_exc, got, flags)
        results[f"example[{i}]"] = "passed" if ok else "failed"
        if not ok:
            report.append(f"example[{i}]: {ex['source'].strip()}\n  expected: {ex['want']!r}\n  got:      {got!r}")
    print("\n".join(report) or f"{len(results)} examples passed")
    return {"mode": "examples", "exit_code": 0 if all(v == "passed" for v in results.values()) else 1,
            "results": results, "no_tests": not results, "usage_error": False}


def grade(cfg: dict) -> int:
    verdict_fd = int(cfg["verdict_fd"])
    os.set_inheritable(verdict_fd, False)
    for d, uid in ((cfg["workdir"], cfg["answer_uid"]), (cfg["grader_home"], cfg["grader_uid"])):
        os.makedirs(d, mode=0o700, exist_ok=True)
        os.chown(d, int(uid), int(uid))
    os.write(verdict_fd, READY)                # before the answer runs: a timeout from here on is the answer's
    remote = _Remote(cfg)                      # the answer process, started while we still may setuid
    _drop(int(cfg["grader_uid"]))              # from here on: no capabilities, not the answer's uid
    os.chdir(cfg["grader_home"])
    try:
        verdict = (_grade_pytest if cfg["mode"] == "pytest" else _grade_examples)(cfg, remote)
    except BaseException as e:  # noqa: BLE001 - an infrastructure error of the grader
        verdict = {"mode": cfg["mode"], "infra_error": f"{type(e).__name__}: {e}", "results": {}}
        traceback.print_exc()
    finally:
        try:
            remote.proc.kill()
        except Exception:
            pass
    data = json.dumps(verdict).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(verdict_fd, view):]
    os.close(verdict_fd)
    sys.stdout.flush()
    code = verdict.get("exit_code")
    return code if isinstance(code, int) and 0 <= code < 128 else 1


def main(argv: list[str]) -> int:
    role, config_path = argv[0], argv[1]
    with open(config_path, encoding="utf-8") as f:
        cfg = json.load(f)
    if role == "worker":
        worker(cfg)
        return 0
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return grade(cfg)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
