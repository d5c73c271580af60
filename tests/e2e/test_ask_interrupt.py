"""Ctrl-C on `causal-assets ask` in a real terminal (tmux): the process exits within 10 s, the local LLM server it
started is gone, and the run is CANCELED, not left STARTED (nor SIGTERM ignored for minutes).

A tiny folder corpus keeps the build short; the interrupt is sent once the llama.cpp server is up, i.e. while the
causal search step is running inside Dagster (where signals are only recorded)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.dagster.procs import ROOT, init_instance

pytestmark = [pytest.mark.slow, pytest.mark.llm, pytest.mark.e2e]

NOTES = {
    "rush.md": "# Rush\n\nRush was a Canadian rock band formed in Toronto. Neil Peart was the drummer of Rush.\n"
               "Rush released the song Counterparts on the album Counterparts in 1993.\n",
    "peart.md": "# Neil Peart\n\nNeil Peart was a Canadian musician and author. Neil Peart wrote the lyrics of Rush.\n"
                "He was inducted into the Modern Drummer Hall of Fame.\n",
}
EXIT_WITHIN_S = 10


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live descendant of `pid` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            try:
                cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            out.append((child, cmd))
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.system("tmux")
def test_ctrl_c_stops_ask_its_server_and_cancels_the_run(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text)
    (tmp_path / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx",
         "options": {"subpackages": ["algorithms.shortest_paths.unweighted"]}},
        {"name": "notes", "loader": "folder", "path": str(notes)}]}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    init_instance(home)
    env = {"DAGSTER_HOME": home, "CAUSAL_ASSETS_CORPORA": tmp_path / "corpora.yaml",
           "CAUSAL_ASSETS_BASE_PATH": tmp_path / "parquet", "CAUSAL_ASSETS_CATALOG": tmp_path / "catalog.duckdb",
           "CAUSAL_ASSETS_REPORTS": tmp_path / "reports", "CAUSAL_ASSETS_QUERIES": tmp_path / "queries",
           "CAUSAL_ASSETS_LLM_CACHE": tmp_path / "llm_calls.sqlite", "PYTHONPATH": ROOT}
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    done = tmp_path / "exit_code"
    command = (f"cd {ROOT} && env {exports} {sys.executable} -m causal_assets.cli ask "
               f"'Which band did Neil Peart play drums for?' --corpus notes > {tmp_path / 'out.txt'} "
               f"2> {tmp_path / 'err.txt'}; echo $? > {done}; sleep 600")
    session = f"ask-interrupt-{os.getpid()}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "50", command], check=True)
    try:
        shell = int(subprocess.run(["tmux", "display-message", "-p", "-t", session, "#{pane_pid}"], check=True,
                                   capture_output=True, text=True).stdout.strip())
        deadline = time.monotonic() + 900  # building the tiny corpus + MiniLM + server start, on a loaded machine
        server = None
        while server is None:
            assert not done.exists(), (done.read_text(), (tmp_path / "err.txt").read_text()[-3000:])
            assert time.monotonic() < deadline, "the LLM server never started"
            server = next((p for p, cmd in descendants(shell) if "llama_cpp.server" in cmd), None)
            time.sleep(0.5)
        time.sleep(2)  # inside the LLM stage (or its start-up)
        t0 = time.monotonic()
        subprocess.run(["tmux", "send-keys", "-t", session, "C-c"], check=True)
        while not done.exists() and time.monotonic() - t0 < 60:
            time.sleep(0.1)
        took = time.monotonic() - t0
        err = (tmp_path / "err.txt").read_text()
        assert done.exists(), f"ask still running 60 s after Ctrl-C:\n{err[-3000:]}"
        assert took <= EXIT_WITHIN_S, f"exit took {took:.1f}s"
        assert done.read_text().strip() == "130", err[-3000:]
        assert not alive(server), f"llama server pid {server} still running"
        assert "Traceback" not in err and re.search(r"; run \S+ marked CANCELED", err), err[-3000:]
        assert "llama_context" not in err and "Welcome to Dagster" not in err, err[-3000:]
        from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

        with DagsterInstance.from_config(str(home)) as instance:
            [run] = instance.get_runs(RunsFilter(job_name="search_job"))
            assert run.status == DagsterRunStatus.CANCELED
        print(f"\nCtrl-C -> exit 130 in {took:.1f}s; server pid {server} gone; run {run.run_id} CANCELED "
              f"(load {os.getloadavg()[0]:.1f})")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
