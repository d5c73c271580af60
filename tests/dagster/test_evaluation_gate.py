"""The evaluation's regression gate, materialized for real on the default benchmark (networkx's shortest-path
modules, 23 test questions): no baseline passes; an unchanged re-run passes; a planted regression (the gated
retriever configured to fuse each ranking's first document only) fails the blocking check, so the labels export of the same run does
not materialize; the per-query table, the HTML report and the cost ledger are written beside it."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from dagster import AssetSpec, DagsterInstance, materialize

from causal_assets.core.evaluation import gate as gates
from causal_assets.core.llm import ledger
from causal_assets.core.outputs.catalog import DuckDBCatalog
from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
from causal_assets.defs.evaluation import evaluation_tables
from causal_assets.defs.export import labels_export
from causal_assets.defs.partitions import benchmark_partitions

pytestmark = pytest.mark.slow

INDEX = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary]
# reciprocal rank fusion of each ranking's first document only: the gated retriever keeps two documents a question
BROKEN = {"depth": 1}


def default_benchmark(resources, rrf: dict | None = None) -> None:
    """The shipped `default` benchmark (questions mined from networkx) on its shortest-path modules, gated on the
    reciprocal rank fusion, without the answer utility (no model)."""
    corpora = Path(resources["corpus_registry"].path)
    registry = yaml.safe_load(corpora.read_text())
    [default] = [c for c in registry["corpora"] if c["name"] == "default"]
    default["options"] = {"subpackages": ["algorithms.shortest_paths"]}
    corpora.write_text(yaml.safe_dump(registry))
    path = Path(resources["benchmark_registry"].path)
    benchmarks = yaml.safe_load(path.read_text())
    benchmarks["benchmarks"] = [b for b in benchmarks["benchmarks"] if b["name"] != "default"] + [{
        "name": "default", "loader": "python_package_api", "corpus": "default", "options": {"max_questions": 200},
        "splits": ["dev", "train", "test"], "eval_splits": ["test"], "tune_split": "train",
        "validator": "fqn_match", "retrievers": {"bm25": {}, "rrf": rrf or {}},
        "answers": {"enabled": False}, "gate": {"retriever": "rrf"}}]
    path.write_text(yaml.safe_dump(benchmarks))


def evaluate(resources, instance, accept: bool = False, with_export: bool = False):
    # the export's inputs are declared, never loaded: the blocking check skips its step before it reads them
    inputs = [AssetSpec(name, partitions_def=benchmark_partitions) for name in ("mc_labels", "candidate_pools")]
    assets = [evaluation_tables, *INDEX, *([labels_export, *inputs] if with_export else [])]
    selection = [*(o for o in evaluation_tables.keys), *([labels_export.key] if with_export else [])]
    return materialize(assets, resources=resources, partition_key="default", instance=instance,
                       selection=selection, raise_on_error=False,
                       run_config={"ops": {"evaluation_tables": {"config": {"tuned": False, "accept": accept}}}})


def gate_check(result):
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "no_regression"]
    return check


def test_gate_passes_without_baseline_and_unchanged_then_blocks_a_planted_regression(resources):
    default_benchmark(resources)
    instance = DagsterInstance.ephemeral()
    assert materialize(INDEX, resources=resources, partition_key="default", instance=instance).success
    base = resources["storage"].base

    first = evaluate(resources, instance, accept=True)
    assert first.success
    check = gate_check(first)
    assert check.passed and "no accepted baseline" in check.metadata["message"].value
    assert set(gates.read_baseline(base, "default")["run_id"]) == {first.run_id}   # accepted by config

    again = evaluate(resources, instance)
    assert again.success
    message = gate_check(again).metadata["message"].value
    assert gate_check(again).passed and "rrf ndcg@10 on `test`: Δ +0.0000" in message and "no drop" in message

    # the per-query table, its view, the HTML report and the cost ledger of the run
    drill = pd.read_parquet(f"{base}/evaluation_per_query/default.parquet")
    assert set(drill["retriever"]) == {"bm25", "rrf"} and drill["query_id"].nunique() == 23
    assert drill["gold_ranks"].map(len).eq(1).all()
    [mat] = [e.materialization for e in again.get_asset_materialization_events()
             if e.materialization.asset_key.path[-1] == "evaluation_per_query"]
    assert "| split " in mat.metadata["worst_queries"].value and "gold ranks" in mat.metadata["worst_queries"].value
    html = (resources["storage"].reports_path / "default.html").read_text()
    assert "id=per_query" in html and "data:image/png;base64," in html and "passed: passed against" in html
    costs = ledger.read_ledger(base, "default")
    assert set(costs["run_id"]) == {first.run_id, again.run_id} and costs["calls_paid"].sum() == 0
    with DuckDBCatalog(resources["storage"].catalog_path).connect() as con:
        assert con.execute("select count(*) from evaluation_per_query where benchmark = 'default'").fetchone()[0] \
            == len(drill)
        assert con.execute("select count(distinct run_id) from cost_ledger").fetchone()[0] == 2
        assert con.execute("select count(distinct run_id) from evaluation_history").fetchone()[0] == 2

    default_benchmark(resources, rrf=BROKEN)   # the planted regression
    broken = evaluate(resources, instance, with_export=True)
    assert not broken.success
    check = gate_check(broken)
    message = check.metadata["message"].value
    assert not check.passed and message.startswith("regression: rrf ndcg@10 on `test` (truth qrels) fell ")
    assert "Δ -" in message and "p 0.0" in message and "on 23 questions" in message
    written = {e.materialization.asset_key.path[-1] for e in broken.get_asset_materialization_events()}
    assert "evaluation_metrics" in written and "labels_export" not in written
    # the blocking check fails the evaluation's step after its tables are written; the export never starts
    steps = {(e.step_key, e.event_type_value) for e in broken.all_events if e.step_key}
    assert ("evaluation_tables", "STEP_FAILURE") in steps
    assert not any(step == "labels_export" for step, _ in steps)
