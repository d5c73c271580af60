"""The UI end to end: `dagster dev` started headless in its own process group on a free port, a materialization
launched through the GraphQL API and followed to success, and a screenshot of the asset graph taken with headless
Chromium. Temp DAGSTER_HOME and storage (environment variables, as a deployment sets them); nothing under the
checkout's data/ unless CAUSAL_ASSETS_UI_SCREENSHOT_DIR points there."""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dagster import DagsterRunStatus

from causal_assets.core.llm.server import free_port
from tests.conftest import HOTPOT, require, require_system
from tests.dagster.procs import DAGSTER, ROOT, group_alive, init_instance, shutdown_grace_s, stop_group

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # dagster dev start-up alone is ~13 s quiet, minutes under load

STARTUP_TIMEOUT_S = 240
RUN_TIMEOUT_S = 240


def _location_status(url: str) -> tuple[str | None, str | None]:
    """(load status, load error message) of the causal_assets code location; a location can be LOADED with an
    error (its definitions failed to import), which must fail the test at once rather than time out later."""
    query = (b'{"query": "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus '
             b'locationOrLoadError { __typename ... on PythonError { message } } } } } }"}')
    request = urllib.request.Request(f"{url}/graphql", data=query, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            entries = json.loads(resp.read())["data"]["workspaceOrError"]["locationEntries"]
    except (OSError, KeyError, TypeError, ValueError):
        return None, None
    entry = next((e for e in entries if e["name"] == "causal_assets"), None)
    if entry is None:
        return None, None
    error = entry.get("locationOrLoadError") or {}
    return entry["loadStatus"], error.get("message") if error.get("__typename") == "PythonError" else None


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui")
    hotpot = root / "hotpot_small.jsonl"
    hotpot.write_text("\n".join(require(HOTPOT).read_text().splitlines()[:3]) + "\n")
    (root / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx",
         "options": {"subpackages": ["algorithms.shortest_paths.unweighted"]}},
        {"name": "hotpotqa", "loader": "hotpotqa", "path": str(hotpot)}]}))
    (root / "benchmarks.yaml").write_text(yaml.safe_dump({"benchmarks": [
        {"name": "hotpotqa", "loader": "hotpotqa", "corpus": "hotpotqa", "path": str(hotpot),
         "splits": ["dev"], "eval_splits": ["dev"], "validator": "answer_f1"}]}))
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\nnux:\n  enabled: false\n")  # no welcome modal over the screenshot
    init_instance(home)
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1",
           "CAUSAL_ASSETS_CORPORA": str(root / "corpora.yaml"), "CAUSAL_ASSETS_BENCHMARKS": str(root / "benchmarks.yaml"),
           "CAUSAL_ASSETS_BASE_PATH": str(root / "parquet"), "CAUSAL_ASSETS_CATALOG": str(root / "catalog.duckdb"),
           "CAUSAL_ASSETS_REPORTS": str(root / "reports"), "CAUSAL_ASSETS_LLM_CACHE": str(root / "llm_calls.sqlite"),
           "CAUSAL_ASSETS_QUERIES": str(root / "queries")}  # the inbox sensor must not read the checkout's data/
    log = open(root / "dagster_dev.log", "w")
    t0 = time.monotonic()
    # As the README starts it: no -m, so the location is named from pyproject.toml (causal_assets).
    proc = subprocess.Popen([DAGSTER, "dev", "-h", "127.0.0.1", "-p", str(port)],
                            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    startup_s = float("nan")  # reported at shutdown even when start-up failed
    try:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"dagster dev exited with {proc.returncode}:\n"
                                     + (root / "dagster_dev.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > STARTUP_TIMEOUT_S:
                raise AssertionError(f"dagster dev not up after {STARTUP_TIMEOUT_S}s")
            time.sleep(0.5)
        # /server_info answers before the code location is loaded: wait for the location too.
        while True:
            status, error = _location_status(url)
            assert error is None, f"code location causal_assets failed to load:\n{error}"
            if status == "LOADED":
                break
            if proc.poll() is not None or time.monotonic() - t0 > STARTUP_TIMEOUT_S:
                raise AssertionError("code location causal_assets not loaded:\n"
                                     + (root / "dagster_dev.log").read_text()[-3000:])
            time.sleep(0.5)
        startup_s = time.monotonic() - t0
        yield {"url": url, "port": port, "root": root, "env": env, "startup_s": startup_s}
    finally:
        # dagster dev treats SIGTERM like Ctrl-C: it stops the webserver, daemon and code server it started. Under
        # load that can take minutes: the grace period scales with the load average, and whatever is still running
        # after it is SIGKILLed with its whole group (reported, not an error: the result must not depend on load).
        grace = shutdown_grace_s()
        try:
            stopped = stop_group(proc, grace)
        finally:
            log.close()
        how = "gracefully" if stopped["graceful"] else f"SIGKILL of {stopped['killed']} after {grace:.0f}s"
        print(f"\ndagster dev: up in {startup_s:.1f}s, shut down in {stopped['seconds']:.1f}s ({how}; "
              f"load {os.getloadavg()[0]:.1f})")
        assert not group_alive(proc.pid)


def test_materialize_through_graphql(ui):
    from dagster_graphql import DagsterGraphQLClient

    client = DagsterGraphQLClient("127.0.0.1", port_number=ui["port"])
    t0 = time.monotonic()
    run_id = client.submit_job_execution(
        "__ASSET_JOB", repository_location_name="causal_assets", repository_name="__repository__", asset_selection=[["corpus_chunks"]],
        tags={"dagster/partition": "hotpotqa"},
        run_config={"execution": {"config": {"in_process": {}}}})  # one process for a one-step run
    status = client.get_run_status(run_id)
    while status not in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
        assert time.monotonic() - t0 < RUN_TIMEOUT_S, f"run {run_id} still {status} after {RUN_TIMEOUT_S}s"
        time.sleep(1)
        status = client.get_run_status(run_id)
    assert status == DagsterRunStatus.SUCCESS, (ui["root"] / "dagster_dev.log").read_text()[-3000:]
    chunks = pd.read_parquet(ui["root"] / "parquet" / "corpus_chunks" / "hotpotqa.parquet")
    assert len(chunks) == 30 and set(chunks["corpus"]) == {"hotpotqa"}
    print(f"\nGraphQL run {run_id}: SUCCESS in {time.monotonic() - t0:.1f}s (server up in {ui['startup_s']:.1f}s)")


def test_asset_graph_screenshot(ui, tmp_path):
    chromium = require_system("chromium")
    out_dir = Path(os.environ.get("CAUSAL_ASSETS_UI_SCREENSHOT_DIR") or ui["root"] / "reports" / "ui")
    out_dir.mkdir(parents=True, exist_ok=True)
    shot = out_dir / "asset_graph.png"
    shot.unlink(missing_ok=True)
    page = f"{ui['url']}/asset-groups"
    t0 = time.monotonic()
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1600,1000",
                           "--virtual-time-budget=20000", f"--screenshot={shot}", page],
                          capture_output=True, text=True, timeout=180, start_new_session=True)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1600, 1000) and len(data) > 20_000  # a rendered page, not a blank one
    print(f"\nscreenshot {shot} ({len(data)} bytes) in {time.monotonic() - t0:.1f}s")
