"""Step retries of the LLM steps (defs/retries.py): only an infrastructure failure that can go away is retried; a
corrupt input or a bug fails at once (probe 3 #10: a truncated graph_nodes cost ~45 s of retries before the same
error)."""
from __future__ import annotations

import time

import pytest
from dagster import DagsterEventType, DagsterInstance, Output, RetryPolicy, job, materialize, op

from causal_assets.commands.build import failure_line
from causal_assets.core.llm.errors import LLMInfrastructureError
from causal_assets.core.local_search import inbox
from causal_assets.defs.retries import infrastructure_retries
from causal_assets.defs.search import causal_search, query_partitions
from causal_assets.resources import LLM, Storage


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

    def bug():
        raise KeyError("node_id")

    assert _attempts(_run(endpoint_down, yields)) == 3
    assert _attempts(_run(bad_key, yields)) == 1
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
    assert "ArrowInvalid" in failure_line(result)
