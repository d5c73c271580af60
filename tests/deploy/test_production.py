"""The production profile (deploy/) for real on this machine: a throwaway PostgreSQL cluster (initdb/pg_ctl in a temp
dir on 127.0.0.1), the code location served by `dagster code-server`, `dagster-daemon` and `dagster-webserver` as
separate processes with deploy/dagster.yaml and deploy/workspace.yaml, each started with its systemd unit's command
(deploy/systemd/), runs launched through GraphQL. The webserver must not answer on the machine's other addresses.

The killed-run scenario: a `causal_search` step (pool `llm`, one slot) is inside its LLM call (a local
stand-in endpoint that holds the request) when its run worker gets SIGKILL. The run must end FAILURE, the slot must
be given back, and the automatic re-execution (run_retries) must get the slot and succeed once the endpoint answers.

deploy/dagster.yaml is used as shipped except for two intervals shortened for the test (monitoring poll and the delay
before freeing slots of finished runs). Everything runs in its own process group and is torn down in `finally`."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from causal_assets.core.llm.server import free_port
from tests.conftest import require_system
from tests.deploy.services import Postgres
from tests.dagster.procs import ROOT, group_alive
from tests.deploy.systemd_units import exec_start
from tests.helpers.endpoint import FakeEndpoint, chat_completion, send_json

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
DEPLOY = ROOT / "deploy"
STARTUP_TIMEOUT_S = 300
RUN_TIMEOUT_S = 300
IN_PROCESS = {"execution": {"config": {"in_process": {}}}}


# ------------------------------------------------------------------------------------------------ LLM endpoint
class Holding:
    """A `respond` of the fake endpoint: while `hold` is set, each completion request is held open (and `held` set)
    until the client goes away or `hold` is cleared; otherwise it is answered at once. The model list is always
    answered at once."""

    def __init__(self):
        self.hold = threading.Event()
        self.hold.set()
        self.held = threading.Event()

    def __call__(self, h) -> None:
        if h.command == "GET":
            send_json(h, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
            return
        if self.hold.is_set():
            self.held.set()
            deadline = time.monotonic() + 600
            while self.hold.is_set() and time.monotonic() < deadline:
                time.sleep(0.2)
        send_json(h, chat_completion("Charles Babbage designed the Analytical Engine."))


# ------------------------------------------------------------------------------------------------ processes
def start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop(proc: subprocess.Popen, grace_s: float = 30) -> list[int]:
    """SIGTERM the process group, SIGKILL it after `grace_s`; returns pids that were still alive at SIGKILL time."""
    stubborn: list[int] = []
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 5
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    stubborn = group_alive(proc.pid)
    if stubborn:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    return stubborn


def graphql(url: str, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        payload = json.loads(resp.read())
    assert "errors" not in payload, payload["errors"]
    return payload["data"]


def wait_for(what: str, predicate, timeout_s: float, logs: list[Path], interval_s: float = 1.0):
    t0 = time.monotonic()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() - t0 > timeout_s:
            tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in logs if p.exists())
            raise AssertionError(f"{what}: not within {timeout_s}s\n{tails}")
        time.sleep(interval_s)


LOCATION = '{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }'
RUN = 'query($id: ID!) { runOrError(runId: $id) { ... on Run { status tags { key value } } } }'
RUNS = '{ runsOrError(limit: 20) { ... on Runs { results { runId status tags { key value } } } } }'
POOL = '{ instance { concurrencyLimit(concurrencyKey: "llm") { slotCount claimedSlots { runId stepKey } pendingSteps { runId stepKey } } } }'
LOGS = 'query($id: ID!) { logsForRun(runId: $id, limit: 500) { ... on EventConnection { events { __typename ... on MessageEvent { message } } } } }'
ADD_PARTITION = ('mutation($key: String!) { addDynamicPartition(repositorySelector: {repositoryLocationName: "causal_assets", '
                 'repositoryName: "__repository__"}, partitionsDefName: "queries", partitionKey: $key) { __typename } }')


def run_status(url: str, run_id: str) -> str:
    return graphql(url, RUN, {"id": run_id})["runOrError"]["status"]


def worker_pid(url: str, run_id: str) -> int | None:
    """The run worker's pid from the run's own log ("Started process for run (pid: N).")."""
    events = graphql(url, LOGS, {"id": run_id})["logsForRun"]["events"]
    for e in events:
        m = re.search(r"Started process for run \(pid: (\d+)\)", e.get("message") or "")
        if m:
            return int(m.group(1))
    return None


@pytest.fixture
def deployment(tmp_path):
    require_system("postgresql")
    root = tmp_path
    docs = root / "tiny_docs"
    docs.mkdir()
    (docs / "babbage.md").write_text(
        "# Charles Babbage\n\nCharles Babbage designed the Analytical Engine in London. Ada Lovelace wrote the first "
        "program for the Analytical Engine.\n")
    (docs / "lovelace.md").write_text(
        "# Ada Lovelace\n\nAda Lovelace worked with Charles Babbage in London on the Analytical Engine and described "
        "Bernoulli numbers.\n")
    (docs / "turing.md").write_text(
        "# Alan Turing\n\nAlan Turing worked at Bletchley Park and later in Manchester on the Manchester Mark 1.\n")
    (root / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx",
         "options": {"subpackages": ["algorithms.shortest_paths.unweighted"]}},
        {"name": "tiny", "loader": "folder", "path": str(docs)}]}))
    (root / "benchmarks.yaml").write_text(yaml.safe_dump({"benchmarks": [
        {"name": "default", "loader": "python_package_api", "corpus": "default", "options": {"max_questions": 5},
         "splits": ["dev"], "eval_splits": ["dev"], "validator": "fqn_match"}]}))
    home = root / "dagster_home"
    home.mkdir()
    config = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    config["run_monitoring"].update(poll_interval_seconds=2, free_slots_after_run_end_seconds=1)  # test pacing only
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    shutil.copy(DEPLOY / "workspace.yaml", home / "workspace.yaml")

    logs = {name: root / f"{name}.log" for name in ("code_server", "daemon", "webserver")}
    procs: list[subprocess.Popen] = []
    with ExitStack() as stack:
        pg = Postgres()
        stack.callback(pg.stop)
        t0 = time.monotonic()
        pg.start()
        pg_s = time.monotonic() - t0
        llm = Holding()
        llm_url = stack.enter_context(FakeEndpoint(llm)).url
        stack.callback(llm.hold.clear)   # before the server closes
        code_port, web_port = free_port(), free_port()
        env = {**os.environ, **pg.env(), "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1",
               "DAGSTER_CODE_SERVER_HOST": "127.0.0.1", "DAGSTER_CODE_SERVER_PORT": str(code_port),
               "CAUSAL_ASSETS_CORPORA": str(root / "corpora.yaml"),
               "CAUSAL_ASSETS_BENCHMARKS": str(root / "benchmarks.yaml"),
               "CAUSAL_ASSETS_BASE_PATH": str(root / "parquet"), "CAUSAL_ASSETS_CATALOG": str(root / "catalog.duckdb"),
               "CAUSAL_ASSETS_REPORTS": str(root / "reports"), "CAUSAL_ASSETS_QUERIES": str(root / "queries"),
               "CAUSAL_ASSETS_LLM_CACHE": str(root / "llm_calls.sqlite"),
               "CAUSAL_ASSETS_LLM_BASE_URL": llm_url, "CAUSAL_ASSETS_LLM_MODEL": "fake-model",
               "CAUSAL_ASSETS_WEBSERVER_PORT": str(web_port)}

        def teardown():
            stubborn = {}
            for proc, name in reversed(list(zip(procs, ("code_server", "daemon", "webserver")))):
                left = stop(proc)
                if left:
                    stubborn[name] = left
            print(f"\nteardown: processes that needed SIGKILL: {stubborn or 'none'}")

        stack.callback(teardown)
        # The order of a deployment: code server first (the others connect to it), then daemon and webserver, each
        # with the command of its systemd unit (deploy/systemd/)
        procs.append(start(exec_start("code-server", env, BIN), env, logs["code_server"]))
        def code_server_serving():
            assert procs[0].poll() is None, f"code server exited:\n{logs['code_server'].read_text()[-3000:]}"
            return subprocess.run([str(BIN / "dagster"), "api", "grpc-health-check", "--host", "127.0.0.1",
                                   "--port", str(code_port)], env=env, capture_output=True, timeout=60).returncode == 0

        wait_for("code server answering health checks", code_server_serving, STARTUP_TIMEOUT_S, [logs["code_server"]],
                 interval_s=2)
        procs.append(start(exec_start("daemon", env, BIN), env, logs["daemon"]))
        procs.append(start(exec_start("webserver", env, BIN), env, logs["webserver"]))
        url = f"http://127.0.0.1:{web_port}"

        def location_loaded():
            for p, name in zip(procs, logs):
                assert p.poll() is None, f"{name} exited with {p.returncode}:\n{logs[name].read_text()[-3000:]}"
            try:
                entries = graphql(url, LOCATION)["workspaceOrError"]["locationEntries"]
            except (OSError, AssertionError, KeyError, TypeError, ValueError):
                return False
            entry = next((e for e in entries if e["name"] == "causal_assets"), None)
            if entry and (entry.get("locationOrLoadError") or {}).get("__typename") == "PythonError":
                raise AssertionError(f"code location failed to load: {entry['locationOrLoadError']['message']}")
            return bool(entry and entry["loadStatus"] == "LOADED"
                        and (entry.get("locationOrLoadError") or {}).get("__typename") == "RepositoryLocation")

        wait_for("code location loaded through the gRPC code server", location_loaded, STARTUP_TIMEOUT_S,
                 list(logs.values()))

        def retries_armed():
            # Dagster's event-log consumer (run_retries) starts its RUN_FAILURE cursor at the newest event on its
            # first tick and never looks back: a run failing before that tick is not retried. A deployment is up
            # for retries once the cursor is stored.
            import psycopg2
            from dagster import DagsterEventType

            key = f"EVENT_LOG_CONSUMER_CURSOR-{DagsterEventType.RUN_FAILURE.value}"
            with psycopg2.connect(host="127.0.0.1", port=pg.port, user="dagster", password=pg.password,
                                  dbname="postgres") as conn, conn.cursor() as cur:
                cur.execute("SELECT 1 FROM kvs WHERE key = %s", (key,))
                return cur.fetchone() is not None

        wait_for("the daemon's run-retry consumer holding its cursor", retries_armed, STARTUP_TIMEOUT_S,
                 [logs["daemon"]], interval_s=1)
        startup_s = time.monotonic() - t0
        yield {"url": url, "root": root, "llm": llm, "logs": list(logs.values()), "pg_s": pg_s,
               "startup_s": startup_s, "web_port": web_port}


def wait_run(d: dict, run_id: str, statuses=("SUCCESS", "FAILURE", "CANCELED"), timeout_s: float = RUN_TIMEOUT_S) -> str:
    return wait_for(f"run {run_id} in {statuses}",
                    lambda: (lambda s: s if s in statuses else None)(run_status(d["url"], run_id)), timeout_s, d["logs"])


def external_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback: the host name's, and the one a route out leaves from
    (a UDP `connect` sends nothing). None on a machine without a network."""
    found = set()
    try:
        found |= {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    except OSError:
        pass
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))   # TEST-NET-1: routed like any outside address, never reached
            found.add(probe.getsockname()[0])
        except OSError:
            pass
    return sorted(a for a in found if not a.startswith("127.") and a != "0.0.0.0")


def test_killed_run_worker_frees_llm_slot_and_rerun_succeeds(deployment):
    from dagster_graphql import DagsterGraphQLClient

    from causal_assets.core.local_search import inbox

    d = deployment
    timings = {"postgres_up_s": round(d["pg_s"], 1), "deployment_up_s": round(d["startup_s"], 1)}
    client = DagsterGraphQLClient("127.0.0.1", port_number=d["web_port"])
    # The webserver (no authentication) answers on loopback only: not on this machine's other addresses.
    for address in external_addresses():
        with pytest.raises(OSError), socket.create_connection((address, d["web_port"]), timeout=5):
            pass

    # 1. A partitioned run through GraphQL: the tiny folder corpus's chunks and entity graph.
    t0 = time.monotonic()
    index_run = client.submit_job_execution(
        "__ASSET_JOB", repository_location_name="causal_assets", repository_name="__repository__",
        asset_selection=[["corpus_chunks"], ["graph_nodes"], ["graph_edges"]], tags={"dagster/partition": "tiny"},
        run_config=IN_PROCESS)
    assert wait_run(d, index_run) == "SUCCESS"
    timings["index_run_s"] = round(time.monotonic() - t0, 1)
    assert (d["root"] / "parquet" / "graph_nodes" / "tiny.parquet").exists()

    # 2. A causal_search run (pool llm, 1 slot) whose LLM call is held open by the endpoint.
    qid = inbox.submit(d["root"] / "queries", "Who designed the Analytical Engine?", "tiny")
    assert graphql(d["url"], ADD_PARTITION, {"key": qid})["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess"
    t0 = time.monotonic()
    victim = client.submit_job_execution(
        "__ASSET_JOB", repository_location_name="causal_assets", repository_name="__repository__",
        asset_selection=[["causal_search"]], tags={"dagster/partition": qid}, run_config=IN_PROCESS)
    wait_for("the causal_search step inside its LLM call", d["llm"].held.is_set, RUN_TIMEOUT_S, d["logs"])
    pool = graphql(d["url"], POOL)["instance"]["concurrencyLimit"]
    assert pool["slotCount"] == 1 and [s["runId"] for s in pool["claimedSlots"]] == [victim], pool
    pid = worker_pid(d["url"], victim)
    assert pid, "no 'Started process for run (pid: N)' event"
    timings["victim_in_llm_call_s"] = round(time.monotonic() - t0, 1)

    # 3. SIGKILL the run worker; the endpoint answers from now on.
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    d["llm"].hold.clear()
    assert wait_run(d, victim, timeout_s=60) == "FAILURE"
    timings["failure_detected_s"] = round(time.monotonic() - killed_at, 1)

    def victim_slot_freed():
        p = graphql(d["url"], POOL)["instance"]["concurrencyLimit"]
        return all(s["runId"] != victim for s in p["claimedSlots"] + p["pendingSteps"])

    wait_for("the killed run's llm slot freed", victim_slot_freed, 60, d["logs"], interval_s=0.5)
    timings["slot_freed_s"] = round(time.monotonic() - killed_at, 1)

    # 4. The re-execution (run_retries in deploy/dagster.yaml) takes the slot and completes.
    def retry_run():
        runs = graphql(d["url"], RUNS)["runsOrError"]["results"]
        return next((r["runId"] for r in runs
                     if {"key": "dagster/parent_run_id", "value": victim} in r["tags"]), None)

    try:
        retry = wait_for("an automatic re-execution of the killed run", retry_run, 120, d["logs"])
    except AssertionError as e:
        tags = next((r["tags"] for r in graphql(d["url"], RUNS)["runsOrError"]["results"] if r["runId"] == victim), None)
        raise AssertionError(f"{e}\n--- the killed run's tags: {tags}") from None
    assert wait_run(d, retry) == "SUCCESS"
    timings["rerun_success_s"] = round(time.monotonic() - killed_at, 1)
    assert (d["root"] / "parquet" / "causal_search" / f"{qid}.parquet").exists()
    wait_for("no llm slot held after the re-run", lambda: not graphql(d["url"], POOL)["instance"]["concurrencyLimit"]["claimedSlots"],
             30, d["logs"], interval_s=0.5)
    print(f"\nproduction profile timings: {json.dumps(timings)} (load {os.getloadavg()[0]:.1f})")
