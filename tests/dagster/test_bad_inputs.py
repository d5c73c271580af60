"""Bad inputs on the query side get one clear message (docs/troubleshooting.md): query partition keys that are paths or
too long for a file name, partition keys that would make the IO manager write outside the base path, and bad
queries, corpora and options on `causal-assets search` / `sql`. Real materializations and the real CLI."""
from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from dagster import DagsterInstance, DynamicPartitionsDefinition, asset, materialize

from causal_assets.cli import main
from causal_assets.core.foundation.storage import asset_path
from causal_assets.defs.corpus import corpus_chunks, sparse_postings_and_vocabulary
from causal_assets.defs.evaluation import evaluation_tables
from causal_assets.defs.labels import candidate_pools
from causal_assets.defs.search import query_partitions, retrieval_results


def _failure(result) -> str:
    err = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0].step_failure_data.error
    while err.cause:
        err = err.cause
    return err.message


@pytest.mark.parametrize("key, message", [
    ("../../../escaped", r"partition key '../../../escaped' contains '/'.*submit this question with `causal-assets ask`"),
    ("What is TCP/IP?", r"contains '/', '\\', NUL or starts with '.'"),
    (".hidden question", r"starts with '.'"),
    ("Ω" * 101, r"partition key is 202 bytes in UTF-8; .* the limit is 200 bytes"),
    ("   ", r"not a usable query \(empty after trimming whitespace\)"),
])
def test_query_partition_keys_that_are_not_file_names_fail_clearly(resources, tmp_path, key, message):
    queries = tmp_path / "queries"
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(query_partitions.name, [key])
        result = materialize([retrieval_results], resources=resources, instance=instance, partition_key=key,
                             raise_on_error=False,
                             run_config={"ops": {"retrieval_results": {"config": {"queries_dir": str(queries)}}}})
    assert not result.success
    assert re.search(message, _failure(result)), _failure(result)
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".json", ".parquet")]
    assert written == [] and not (tmp_path.parent / "escaped.parquet").exists()


escape_partitions = DynamicPartitionsDefinition(name="escape_probe")


@asset(partitions_def=escape_partitions)
def escape_probe() -> pd.DataFrame:
    return pd.DataFrame({"x": [1]})


def test_io_manager_refuses_to_write_outside_the_base_path(resources, tmp_path):
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(escape_partitions.name, ["../../outside"])
        result = materialize([escape_probe], resources=resources, instance=instance, partition_key="../../outside",
                             raise_on_error=False)
    assert not result.success
    assert "outside the storage base path" in _failure(result)
    base = resources["storage"].base
    assert not list(tmp_path.rglob("outside.parquet")) and not (base.parent / "outside.parquet").exists()
    # The library's own path helper refuses such names too (CorpusIndex.load, graph loaders, the CLI).
    with pytest.raises(ValueError, match=r"invalid partition name '\.\./x'"):
        asset_path(base, "corpus_chunks", "../x")


def test_cli_bad_queries_corpora_and_options(resources, capsys, monkeypatch):
    # the registry the index is built from (under the shipped one its source differs, and search would rebuild)
    monkeypatch.setenv("CAUSAL_ASSETS_CORPORA", resources["corpus_registry"].path)
    assert materialize([corpus_chunks, sparse_postings_and_vocabulary], resources=resources, partition_key="hotpotqa").success
    base = resources["storage"].base_path

    def run(*argv, stdin: str | None = None) -> tuple[int, str, str]:
        if stdin is not None:
            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main(["--base-path", base, *argv])
        out, err = capsys.readouterr()
        return code, out, err

    code, _, err = run("search", "x", "--corpus", "../../etc/passwd")
    assert code == 2 and "invalid corpus name '../../etc/passwd'" in err
    code, _, err = run("search", "the of and ?!", "--corpus", "hotpotqa")
    assert code == 1 and "the query has no index terms (only stopwords, punctuation or symbols)" in err
    code, out, err = run("search", "Ñandú 東京 café", "--corpus", "hotpotqa", "--json")
    assert code == 1 and out.strip() == "[]" and "['ñandú', '東京', 'café']" in err
    code, _, err = run("search", "-", "--corpus", "hotpotqa", stdin="drummer " * 100_000)
    assert code == 2 and "query is 800000 characters; the limit is 2000" in err
    code, out, _ = run("search", "-", "--corpus", "hotpotqa", "-k", "1", stdin="Neil Peart drummer\n")
    assert code == 0 and "Neil Peart" in out
    code, _, err = run("search", "drummer", "--corpus", "hotpotqa", "-k", "0")
    assert code == 2 and "-k must be at least 1 (got 0)" in err
    code, _, err = run("search", "drummer", "--corpus", "hotpotqa", "--method", "cascade", "--params", "{bad")
    assert code == 2 and "--params is not valid JSON" in err
    code, _, err = run("search", "drummer", "--corpus", "hotpotqa", "--method", "cascade", "--params", "[]")
    assert code == 2 and "--params must be a JSON object" in err and "Traceback" not in err
    code, _, err = run("search", "drummer", "--corpus", "hotpotqa", "--params", '{"weight": 0.3}')   # bm25
    assert code == 2 and "--method bm25 takes no --params (given: weight)" in err
    code, _, err = run("sql", "select * from no_such_view", "--catalog-path", resources["storage"].catalog_path)
    assert code == 2 and err.startswith("causal-assets: sql: Catalog Error: Table with name no_such_view does not exist")


@pytest.mark.parametrize("asset_def, config, field, bound", [
    (candidate_pools, {"size": 10**30}, "size", "less than or equal to 1000"),
    (candidate_pools, {"max_questions": 10**12}, "max_questions", "less than or equal to 1000000"),
    (evaluation_tables, {"depth": 10**9}, "depth", "less than or equal to 10000"),
])
def test_run_config_counts_past_their_bound_fail_the_step_before_its_work(resources, tmp_path, asset_def, config,
                                                                          field, bound):
    """Run config has the registry's bounds: the step fails as it starts, naming the field, and writes nothing (a
    budget of 10**30 was announced, then looped at full CPU; a run config budget reaches the labelling through
    `LabelingParams`, tests/core/test_registry_refusals.py). Dagster itself refuses `"16"` and `true` for a count
    when the run is launched."""
    from dagster import DagsterInvalidConfigError

    name = asset_def.node_def.name
    with DagsterInstance.ephemeral() as instance:
        result = materialize([asset_def], resources=resources, instance=instance, partition_key="hotpotqa",
                             raise_on_error=False, run_config={"ops": {name: {"config": config}}},
                             selection=[asset_def])
        assert not result.success
        message = _failure(result)
        assert field in message and bound in message, message
        assert [e for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"] == []
        with pytest.raises(DagsterInvalidConfigError, match=rf"{field}.*not valid for expected type"):
            materialize([asset_def], resources=resources, instance=instance, partition_key="hotpotqa",
                        run_config={"ops": {name: {"config": {field: "16"}}}}, selection=[asset_def])
    assert not [p for p in tmp_path.rglob("*.parquet")]
