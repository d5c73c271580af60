"""On-demand retrieval and causal search for a submitted query, end to end with the real local LLM server."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest
from dagster import DagsterInstance, build_sensor_context, materialize

from causal_assets.core.local_search import inbox
from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
from causal_assets.defs.graph import graph_nodes_and_edges
from causal_assets.defs.search import causal_search, query_partitions, retrieval_results
from tests.conftest import HOTPOT, mark_built, require


@pytest.mark.slow
@pytest.mark.llm
def test_causal_search_for_a_submitted_query(resources, tmp_path):
    upstream = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary, graph_nodes_and_edges]
    assert materialize(upstream, resources=resources, partition_key="hotpotqa").success
    queries = tmp_path / "queries"
    qid = inbox.submit(queries, "Which Canadian rock band released the song Counterparts?", "hotpotqa")
    assert len(qid.split("_")[0]) == 8
    # Small budgets: the local server's time goes by the token (prompt tokens, generated ones most). A stage-1 prompt
    # of ~460 tokens (800: ~1100) still holds entities and a relationship; 16-token completions (96 were all used).
    cfg = {"queries_dir": str(queries), "network_max_tokens": 250, "max_tokens": 16}
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(query_partitions.name, [qid])
        result = materialize(upstream + [retrieval_results, causal_search], resources=resources, instance=instance,
                             partition_key=qid, selection=[retrieval_results, causal_search],
                             run_config={"ops": {"retrieval_results": {"config": cfg}, "causal_search": {"config": cfg}}})
    assert result.success
    base = resources["storage"].base_path
    hits = pd.read_parquet(f"{base}/retrieval_results/{qid}.parquet")
    assert hits["rank"].tolist() == list(range(1, 11))
    row = pd.read_parquet(f"{base}/causal_search/{qid}.parquet").iloc[0]
    report, network = Path(row["report_path"]), Path(row["network_data_path"])
    assert report.name == f"causal_search_report_{qid}.md" and network.name == f"causal_search_network_data_{qid}.json"
    data = json.loads(network.read_text())
    assert {"entities", "relationships", "text_units"} <= set(data)
    assert row["n_entities"] > 0 and row["n_relationships"] > 0
    assert row["response"].strip() and "Counterparts" in report.read_text()
    mat = [e.materialization for e in result.get_asset_materialization_events()
           if e.materialization.asset_key.path[-1] == "causal_search"][0]
    assert mat.metadata["report"].value.startswith("#")
    from causal_assets.core.outputs.catalog import DuckDBCatalog

    with DuckDBCatalog(resources["storage"].catalog_path).connect() as con:
        assert con.execute("select count(*) from causal_search_runs").fetchone()[0] == 1
        assert con.execute("select count(*) from retrieval_results").fetchone()[0] == 10


def test_inbox_sensor_turns_files_into_partitions(tmp_path, monkeypatch):
    require(HOTPOT)  # the inbox's default corpus; a file naming an unregistered corpus is refused
    from causal_assets.defs import search

    monkeypatch.setattr(search, "QUERIES_DIR", tmp_path)
    monkeypatch.setattr(search, "BASE_PATH", str(tmp_path / "parquet"))
    mark_built(tmp_path / "parquet", "hotpotqa")
    (tmp_path / "inbox").mkdir()
    (tmp_path / "inbox" / "q1.txt").write_text("Who wrote Killing Pablo?\ncorpus: hotpotqa\n")
    (tmp_path / "inbox" / "empty.txt").write_text("")
    for f in (tmp_path / "inbox").iterdir():   # written 10 s ago: past the settle time of a file being written
        os.utime(f, (time.time() - 10, time.time() - 10))
    with DagsterInstance.ephemeral() as instance:
        first = search.queries_inbox_sensor(build_sensor_context(instance=instance))
        assert len(first.run_requests) == 1  # the empty file is skipped with a warning
        qid = first.run_requests[0].partition_key
        assert inbox.load(tmp_path, qid)["query"] == "Who wrote Killing Pablo?"
        assert first.dynamic_partitions_requests[0].partition_keys == [qid]
        again = search.queries_inbox_sensor(build_sensor_context(instance=instance, cursor=first.cursor))
        assert again.run_requests == []


def test_a_question_typed_as_partition_key_is_adopted(tmp_path):
    record = inbox.load(tmp_path, "Who wrote Killing Pablo?", "hotpotqa")
    assert record["query"] == "Who wrote Killing Pablo?" and record["corpus"] == "hotpotqa"
    assert inbox.load(tmp_path, "Who wrote Killing Pablo?", "hotpotqa")["query_id"] == record["query_id"]  # stable
    import pytest
    from causal_assets.core.foundation.errors import ConfigError

    with pytest.raises(ConfigError, match="no submitted query with id"):
        inbox.load(tmp_path, "0123abcd_1700000000", "hotpotqa")
    with pytest.raises(ConfigError, match="query is empty"):
        inbox.submit(tmp_path, "   ", "hotpotqa")
