"""Benchmark to corpus partitions: a benchmark named differently from its corpus, and two benchmarks on one corpus, must map
each benchmark partition to its corpus partition (Dagster's StaticPartitionMapping is keyed by *upstream* key)."""

import os
import subprocess
import sys

import pandas as pd
import yaml
from dagster import AssetDep, AssetExecutionContext, DagsterInstance, StaticPartitionsDefinition, asset, materialize

from causal_assets.defs.partitions import benchmark_corpus_partition_mapping, corpus_to_benchmarks

B2C = {"hotmini": "hotmini", "hotmini_b": "hotmini"}


def test_two_benchmarks_on_one_corpus_read_that_corpus():
    assert corpus_to_benchmarks(B2C) == {"hotmini": {"hotmini", "hotmini_b"}}
    corpora = StaticPartitionsDefinition(["hotmini"])
    benchmarks = StaticPartitionsDefinition(["hotmini", "hotmini_b"])
    seen = {}

    @asset(partitions_def=corpora)
    def corpus_stage(context: AssetExecutionContext) -> pd.DataFrame:
        return pd.DataFrame({"corpus": [context.partition_key]})

    @asset(partitions_def=benchmarks,
           deps=[AssetDep(corpus_stage, partition_mapping=benchmark_corpus_partition_mapping(B2C))])
    def pools_stage(context: AssetExecutionContext) -> None:
        seen[context.partition_key] = True

    with DagsterInstance.ephemeral() as instance:
        assert materialize([corpus_stage], instance=instance, partition_key="hotmini").success
        for b in ("hotmini_b", "hotmini"):  # a mapping keyed by benchmark raises "mapping source partitions not in
            # the upstream partitions definition" for every benchmark as soon as one is not named after its corpus
            result = materialize([corpus_stage, pools_stage], selection=[pools_stage], instance=instance,
                                 partition_key=b)
            assert result.success
    assert set(seen) == {"hotmini", "hotmini_b"}
    mapping = benchmark_corpus_partition_mapping(B2C)
    up = mapping.get_upstream_mapped_partitions_result_for_partitions(
        benchmarks.subset_with_partition_keys(["hotmini_b"]), benchmarks, corpora)
    assert set(up.partitions_subset.get_partition_keys()) == {"hotmini"}
    down = mapping.get_downstream_partitions_for_partitions(corpora.subset_with_partition_keys(["hotmini"]),
                                                            corpora, benchmarks)
    assert set(down.get_partition_keys()) == {"hotmini", "hotmini_b"}


def test_shipped_definitions_load_with_a_benchmark_not_named_after_its_corpus(tmp_path):
    """The real code location, with a registry adding `hotmini_b` on the default corpus: pools of `hotmini_b` read
    the `default` index partitions."""
    from causal_assets.settings import Settings

    reg = yaml.safe_load(Settings.from_env().benchmarks.read_text())
    default = next(e for e in reg["benchmarks"] if e["name"] == "default")
    reg["benchmarks"].append({**default, "name": "default_b"})
    path = tmp_path / "benchmarks.yaml"
    path.write_text(yaml.safe_dump(reg))
    code = (
        "from dagster import AssetKey\n"
        "from causal_assets.definitions import defs\n"
        "g = defs.resolve_asset_graph()\n"
        "node = g.get(AssetKey('candidate_pools'))\n"
        "up = g.get(AssetKey('corpus_chunks'))\n"
        "pd_ = node.partitions_def; m = node.partition_mappings[AssetKey('corpus_chunks')]\n"
        "r = m.get_upstream_mapped_partitions_result_for_partitions(pd_.subset_with_partition_keys(['default_b']),"
        " pd_, up.partitions_def)\n"
        "print(sorted(r.partitions_subset.get_partition_keys()))\n")
    env = {**os.environ, "CAUSAL_ASSETS_BENCHMARKS": str(path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "['default']"
