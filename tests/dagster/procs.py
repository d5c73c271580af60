"""Real Dagster runs in separate processes: the project's own CLI (`dagster asset materialize -m
causal_assets.definitions`) with the storage, registries and instance of a test redirected by environment variables
(the same variables a deployment sets), each run in its own process group so a test can kill it whole."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).with_name("dagster"))
IN_PROCESS = {"execution": {"config": {"in_process": {}}}}  # one process per run: the CLI tests' startup cost once


def project_env(resources: dict, dagster_home: Path, **extra: str) -> dict[str, str]:
    """Environment that points the shipped Definitions at a test's storage and small registries."""
    storage = resources["storage"]
    init_instance(dagster_home)
    env = {**os.environ,
           "CAUSAL_ASSETS_CORPORA": resources["corpus_registry"].path,
           "CAUSAL_ASSETS_BENCHMARKS": resources["benchmark_registry"].path,
           "CAUSAL_ASSETS_BASE_PATH": storage.base_path,
           "CAUSAL_ASSETS_CATALOG": storage.catalog_path,
           "CAUSAL_ASSETS_REPORTS": storage.reports_dir,
           "CAUSAL_ASSETS_LLM_CACHE": resources["llm"].cache_path,
           "DAGSTER_HOME": str(dagster_home),
           "PYTHONUNBUFFERED": "1"}
    env.update(extra)
    return env


_EMPTY_INSTANCE: list[Path] = []   # this test process's empty SQLite instance, made once


def init_instance(dagster_home: Path) -> None:
    """Create the SQLite instance schema once. Two processes opening a fresh DAGSTER_HOME at the same moment race on
    `CREATE TABLE runs` (measured here: the second run dies with "table runs already exists"), so concurrent runs
    need an initialized instance (or Postgres run storage). The databases are those of an empty instance this test
    process created once (its schema's migrations take a second or more, loaded seconds more), copied beside the
    home's own dagster.yaml, which is kept."""
    import atexit
    import tempfile

    from dagster import DagsterInstance

    if not _EMPTY_INSTANCE:
        empty = Path(tempfile.mkdtemp(prefix="empty-dagster-instance-"))
        atexit.register(shutil.rmtree, empty, True)
        with DagsterInstance.from_config(str(empty)) as instance:
            instance.get_runs(limit=1)
        _EMPTY_INSTANCE.append(empty)
    dagster_home.mkdir(parents=True, exist_ok=True)
    if not (dagster_home / "history").exists():   # a home with databases of its own keeps them
        shutil.copytree(_EMPTY_INSTANCE[0], dagster_home, dirs_exist_ok=True,
                        ignore=lambda folder, names: ["dagster.yaml"] if Path(folder) == _EMPTY_INSTANCE[0] else [])
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.get_runs(limit=1)   # opens as the home's own config says (its storage, its pools)


def start_materialize(select: str, partition: str, env: dict, run_config: dict | None = None,
                      log_path: Path | None = None) -> subprocess.Popen:
    """`dagster asset materialize` as a child in a new session (process group = its pid); output to `log_path`."""
    cmd = [DAGSTER, "asset", "materialize", "-m", "causal_assets.definitions", "--select", select,
           "--partition", partition, "--config-json", json.dumps(run_config or IN_PROCESS)]
    out = open(log_path, "w") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        if log_path:
            out.close()


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal the whole process group of a child started with start_new_session (never anything else)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


def group_alive(pgid: int) -> list[int]:
    """Pids still alive in process group `pgid` (from /proc)."""
    alive = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(int(d.name))
    return alive


def processes_with_env(marker: str, cmdline_contains: str) -> list[int]:
    """Live pids whose environment mentions `marker` (e.g. a test's tmp dir) and whose command line contains
    `cmdline_contains`: finds what a killed run left behind, whatever its parent now is."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if cmdline_contains in cmd and marker.encode() in (d / "environ").read_bytes():
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(d.name))
        except OSError:
            continue
    return found


def shutdown_grace_s(base_s: float = 60.0, max_factor: float = 5.0) -> float:
    """Grace period for a graceful shutdown, scaled by machine load: at load 12 on 2 cores a `dagster dev` that
    stops in 10 s when quiet took over 60 s."""
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    return base_s * max(1.0, min(max_factor, load / cores))


def stop_group(proc: subprocess.Popen, grace_s: float, kill_wait_s: float = 30.0) -> dict:
    """Stop a child started with start_new_session and everything in its process group: SIGTERM, up to `grace_s`
    for the leader and its group to exit, then SIGKILL for whatever is left. Never raises for a slow shutdown (the
    test's result must not depend on machine load); returns {"graceful", "seconds", "killed"}. Raises only if
    processes survive SIGKILL."""
    import time

    t0 = time.monotonic()
    deadline = t0 + grace_s
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    killed = group_alive(proc.pid) + ([proc.pid] if proc.poll() is None else [])
    graceful = not killed
    if killed:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=kill_wait_s)
        end = time.monotonic() + kill_wait_s
        while group_alive(proc.pid) and time.monotonic() < end:
            time.sleep(0.1)
        left = group_alive(proc.pid)
        if left:
            raise AssertionError(f"processes {left} survived SIGKILL of group {proc.pid}")
    return {"graceful": graceful, "seconds": time.monotonic() - t0, "killed": sorted(set(killed))}
