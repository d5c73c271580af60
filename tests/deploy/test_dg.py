"""The dg toolchain (dagster-dg-cli, [tool.dg] in pyproject.toml): `dg check defs` loads the code location with the
default executor and with CAUSAL_ASSETS_EXECUTOR=k8s (dagster-k8s's k8s_job_executor); `dg list defs --json` lists
the assets; `dg dev` serves the location and stops on SIGTERM, within a bound."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from causal_assets.core.llm.server import free_port
from tests.conftest import load_scaled_s
from tests.dagster.procs import ROOT, group_alive

DG = str(Path(sys.executable).with_name("dg"))  # installed by the dev extra (dagster-dg-cli) into the same venv


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"


def dg_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text((ROOT / "data" / "dagster_home" / "dagster.yaml").read_text())
    return {**os.environ, "DAGSTER_HOME": str(home), "CAUSAL_ASSETS_QUERIES": str(tmp_path / "queries"), **extra}


@pytest.mark.parametrize("executor", ["multiprocess", "k8s"])
@pytest.mark.slow
def test_dg_check_defs(tmp_path, executor):
    t0 = time.monotonic()
    extra = {"CAUSAL_ASSETS_EXECUTOR": executor}
    if executor == "k8s":  # as the user-code image runs it (deploy/k8s/Dockerfile)
        extra["CAUSAL_ASSETS_EXECUTOR_CONFIG"] = str(ROOT / "deploy" / "k8s" / "executor.yaml")
    done = subprocess.run([DG, "check", "defs"], cwd=ROOT, env=dg_env(tmp_path, **extra),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "All definitions loaded successfully" in done.stdout + done.stderr
    print(f"\ndg check defs ({executor}): {time.monotonic() - t0:.1f}s")


@pytest.mark.slow
def test_dg_list_defs_json(tmp_path):
    done = subprocess.run([DG, "list", "defs", "--json"], cwd=ROOT, env=dg_env(tmp_path), capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    listing = json.loads(done.stdout)
    keys = {a["key"] if "key" in a else a["asset_key"] for a in listing["assets"]}
    assert {"corpus_chunks", "candidate_pools", "mc_labels", "labels_export", "evaluation_metrics"} <= keys
    jobs = {j["name"] for j in listing.get("jobs", [])}
    assert {"default_lineage_job", "corpus_index_job"} <= jobs


class DevLog:
    """`dg dev`'s output, read line by line as it comes (into `path` too): the readiness signals are lines of it,
    waited on as events, not polled."""

    def __init__(self, proc: subprocess.Popen, path: Path, signals: dict[str, str]):
        self.path, self.signals = path, signals
        self.seen = {name: threading.Event() for name in signals}
        self.closed = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        with open(self.path, "w") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                for name, text in self.signals.items():
                    if text in line:
                        self.seen[name].set()
        self.closed.set()

    def wait(self, deadline: float) -> list[str]:
        """Waits until every signal has been seen, the output ends or `deadline` (monotonic) passes; returns the
        signals not seen."""
        for event in self.seen.values():
            while not event.is_set() and not self.closed.is_set() and time.monotonic() < deadline:
                event.wait(min(1.0, max(0.0, deadline - time.monotonic())))
        return [name for name, event in self.seen.items() if not event.is_set()]

    def tail(self) -> str:
        return self.path.read_text()[-3000:] if self.path.exists() else ""


def graphql_when_listening(url: str, query: bytes, deadline: float) -> dict:
    """The webserver logs that it serves just before its socket listens: a refused connection is retried until
    `deadline`, anything else raises."""
    request = urllib.request.Request(url, data=query, headers={"Content-Type": "application/json"})
    while True:
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return json.loads(resp.read())["data"]
        except urllib.error.URLError as e:
            if not isinstance(e.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.slow
def test_dg_dev_serves_the_location_and_stops_on_sigterm(tmp_path):
    """`dg dev` serves the code location with its daemon running, and SIGTERM to it (what `kill`, systemd and
    Kubernetes send to the main process) stops everything it started within a bound.

    Ready is two lines of its output: the webserver serving (it logs that after loading the workspace) and the daemon
    starting its threads; then one GraphQL query must find the location LOADED. SIGTERM goes to `dg` alone: it tells
    the webserver and the daemon to stop, then its code server. SIGTERM to the whole group at once races with dg's
    restart of a code server it sees exit ("Code server process has exited with code 0. Restarting", checked every
    5 s): the new one gets no signal and lives until its heartbeat times out (45 s)."""
    port = free_port()
    # SIGINT/SIGTERM as a terminal leaves them (tests/conftest.py): dg dev maps SIGTERM to SIGINT's disposition
    proc = subprocess.Popen([DG, "dev", "-h", "127.0.0.1", "-p", str(port)], cwd=ROOT,
                            env={**dg_env(tmp_path), "PYTHONUNBUFFERED": "1"}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log = DevLog(proc, tmp_path / "dg_dev.log", {
        "webserver": f"Serving dagster-webserver on http://127.0.0.1:{port}",
        "daemon": "Instance is configured with the following daemons"})
    query = b'{"query": "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"}'
    t0 = time.monotonic()
    up_limit, down_limit = load_scaled_s(90, 4), load_scaled_s(30, 4)
    try:
        missing = log.wait(t0 + up_limit)
        assert not missing, (f"dg dev: no sign of {missing} after {time.monotonic() - t0:.0f}s "
                             f"(exit code {proc.poll()})\n" + log.tail())
        data = graphql_when_listening(f"http://127.0.0.1:{port}/graphql", query, time.monotonic() + 10)
        assert {"name": "causal_assets", "loadStatus": "LOADED"} in data["workspaceOrError"]["locationEntries"], data
        up_s = time.monotonic() - t0
        started = group_alive(proc.pid)
    finally:
        t1 = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=down_limit)
            while group_alive(proc.pid) and time.monotonic() - t1 < down_limit:
                time.sleep(0.1)      # the code server ends a moment after dg has told it to
        except subprocess.TimeoutExpired:
            pass
        down_s = time.monotonic() - t1
        leftover = {pid: cmdline(pid) for pid in group_alive(proc.pid)}
        if leftover:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.closed.wait(10)
    print(f"\ndg dev: up in {up_s:.1f}s ({len(started)} processes), down in {down_s:.1f}s "
          f"(load {os.getloadavg()[0]:.1f})")
    assert len(started) >= 4, started    # dg, the webserver, the daemon and the code server
    assert not leftover, (f"processes left {down_limit:.0f}s after SIGTERM: {leftover}\n" + log.tail())
    assert proc.returncode == 0, log.tail()
