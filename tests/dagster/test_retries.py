"""Step retries of the LLM steps (retries.py): only an infrastructure failure that can go away is retried; a
corrupt input or a bug fails at once (retrying a truncated graph_nodes would cost ~45 s before the same error). And
what a retry meets: a local llama.cpp server that died or hung is started again, rather than every attempt going to
the same dead port or waiting 120 s on a stopped server."""
from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import pandas as pd
from dagster import (DagsterEventType, DagsterInstance, Output, RetryPolicy, asset, build_resources, job, materialize,
                     op)

from causal_assets.commands.build import failure_line
from causal_assets.core.llm.cache import CallCache
from causal_assets.core.llm.errors import LLMInfrastructureError
from causal_assets.core.local_search import inbox
from causal_assets.retries import infrastructure_retries
from causal_assets.defs.search import causal_search, query_partitions
from causal_assets.resources import LLM, ParquetIOManagerFactory, Storage


def _attempts(result) -> int:
    return 1 + sum(e.event_type == DagsterEventType.STEP_UP_FOR_RETRY for e in result.all_events)


def _run(raise_it, yields: bool):
    """A real run of one step under a RetryPolicy (no delay) whose compute function, decorated as the LLM
    assets' are, calls `raise_it`."""
    def returning():
        raise_it()

    def yielding():
        raise_it()
        yield Output(None)

    the_step = op(retry_policy=RetryPolicy(max_retries=2), name="the_step")(
        infrastructure_retries(yielding if yields else returning))

    @job
    def once():
        the_step()

    return once.execute_in_process(raise_on_error=False)


@pytest.mark.parametrize("yields", [False, True], ids=["returns", "yields"])
def test_only_infrastructure_errors_that_can_go_away_are_retried(yields):
    def endpoint_down():
        raise LLMInfrastructureError("chat call failed after 5 attempt(s) [connection]", kind="connection")

    def bad_key():
        raise LLMInfrastructureError("chat call failed after 1 attempt(s) [auth]", kind="auth")

    def endpoint_given_up():   # the client retried for its whole give-up bound already
        error = LLMInfrastructureError("the LLM endpoint http://127.0.0.1:9/v1 failed every attempt for 60 s in a "
                                       "row (...); gave up after 60 s", kind="connection")
        error.gave_up = True
        raise error

    def bug():
        raise KeyError("node_id")

    assert _attempts(_run(endpoint_down, yields)) == 3
    assert _attempts(_run(bad_key, yields)) == 1
    assert _attempts(_run(endpoint_given_up, yields)) == 1
    result = _run(bug, yields)
    assert _attempts(result) == 1
    assert failure_line(result) == "step the_step failed: KeyError: 'node_id'"


def test_causal_search_fails_at_once_on_a_corrupt_input(tmp_path):
    storage = Storage(base_path=str(tmp_path / "parquet"), catalog_path=str(tmp_path / "catalog.duckdb"),
                      reports_dir=str(tmp_path / "reports"))
    nodes = tmp_path / "parquet" / "graph_nodes" / "default.parquet"
    nodes.parent.mkdir(parents=True)
    nodes.write_bytes(b"PAR1" + b"\0" * 996)   # a truncated Parquet file
    queries = tmp_path / "queries"
    qid = inbox.submit(queries, "Which function computes pagerank?", "default")
    t0 = time.monotonic()
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(query_partitions.name, [qid])
        result = materialize([causal_search], partition_key=qid, instance=instance, raise_on_error=False,
                             resources={"storage": storage, "llm": LLM(cache_path=str(tmp_path / "llm.sqlite"))},
                             run_config={"ops": {"causal_search": {"config": {"queries_dir": str(queries)}}}})
    seconds = time.monotonic() - t0
    assert not result.success
    assert _attempts(result) == 1 and seconds < 8   # was 3 attempts, 10 s and 20 s apart
    assert failure_line(result).startswith(f"step causal_search failed: {nodes}: cannot read Parquet (")



@asset
def pools() -> pd.DataFrame:
    return pd.DataFrame({"query_id": ["q1"]})


@asset(retry_policy=RetryPolicy(max_retries=2))
def trials(pools: pd.DataFrame) -> pd.DataFrame:   # as mc_trials reads candidate_pools: through the IO manager
    return pools


def test_a_corrupt_input_the_io_manager_loads_fails_at_once_naming_the_file(tmp_path):
    storage = Storage(base_path=str(tmp_path / "parquet"), catalog_path=str(tmp_path / "catalog.duckdb"))
    resources = {"io_manager": ParquetIOManagerFactory(storage=storage)}
    assert materialize([pools], resources=resources).success
    (tmp_path / "parquet" / "pools.parquet").write_bytes(b"PAR1 truncated")
    result = materialize([pools, trials], selection=[trials], resources=resources, raise_on_error=False)
    assert not result.success and _attempts(result) == 1
    pools_file = tmp_path / "parquet" / "pools.parquet"
    assert failure_line(result).startswith(f"step trials failed: {pools_file}: cannot read Parquet ("), \
        failure_line(result)


@pytest.mark.llm
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
@pytest.mark.slow
def test_a_dead_or_hung_local_server_is_started_again_for_the_next_attempt(tmp_path, sig):
    """The `llm` resource of a run (set up once, as in `ask`'s in-process run) whose local server is killed, or
    stopped: the call fails within seconds as `local_server_died`, naming the server's log, with nothing cached as
    an answer; the next `llm.client` (the step's next attempt) starts a new server, which answers."""
    messages = [{"role": "user", "content": "Name a colour. One word."}]
    cache_path = tmp_path / "llm_calls.sqlite"
    with build_resources({"llm": LLM(cache_path=str(cache_path), n_threads=1, n_ctx=1024)}) as res:
        llm = res.llm
        client = llm.client
        pid = llm._server.pid
        os.killpg(pid, sig)
        t0 = time.monotonic()
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(client.chat, messages, max_tokens=4, temperature=0)
            try:
                with pytest.raises(LLMInfrastructureError) as failed:
                    call.result(timeout=15)   # was 5 attempts on the dead port; on a stopped server, 5 x 120 s
            finally:
                if sig == signal.SIGSTOP and call.running():
                    os.killpg(pid, signal.SIGKILL)   # let the old code's call end
        assert failed.value.kind == "local_server_died" and time.monotonic() - t0 < 8
        assert f"its log: {tmp_path / 'llama_server.log'}" in str(failed.value)
        assert CallCache(cache_path).get(client.key_for("chat", messages, max_tokens=4, temperature=0)) is None
        answer = llm.client.chat(messages, max_tokens=4, temperature=0)
        assert llm._server.pid != pid and answer.text.strip() and not answer.cached
