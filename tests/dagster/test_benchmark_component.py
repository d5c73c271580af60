"""A benchmark declared in a user's own `dg` project (`causal_assets.BenchmarkComponent` in a defs.yaml): the
project's definitions hold this package's stages as one partition named after it, with its own data directory,
and build its corpus; a declaration naming a missing folder stops the load naming the defs.yaml; `dg` lists the
component and scaffolds its defs.yaml. No LLM call."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dagster import DagsterInstance, load_from_defs_folder, materialize

from causal_assets.core.foundation.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own-documents"
STAGES = {"corpus_chunks", "corpus_embeddings", "sparse_postings", "sparse_vocabulary", "graph_nodes", "graph_edges",
          "graph_entity_embeddings", "candidate_pools", "mc_trials", "solver_calls", "mc_labels", "label_quality",
          "tuned_encoder", "tuned_embeddings", "tuned_reranker", "tuned_retriever_configs", "evaluation_metrics",
          "evaluation_runs", "evaluation_failures", "evaluation_queries", "evaluation_qrels", "evaluation_answers", "evaluation_per_query",
          "labels_export"}


def scratch_project(root: Path) -> Path:
    """A `dg` project as `create-dagster project` lays it out: src/<module>/defs, pyproject's [tool.dg]."""
    package = root / "src" / "my_project"
    (package / "defs").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "my_project"\nversion = "0.1.0"\n\n[tool.dg]\ndirectory_type = "project"\n\n'
        '[tool.dg.project]\nroot_module = "my_project"\nregistry_modules = ["causal_assets"]\n')
    return package / "defs"


def declare(defs: Path, **attributes) -> Path:
    folder = defs / "my_bench"
    folder.mkdir()
    shutil.copytree(EXAMPLE / "docs", folder / "docs")
    shutil.copy(EXAMPLE / "questions.jsonl", folder / "questions.jsonl")
    (folder / "defs.yaml").write_text(yaml.safe_dump({"type": "causal_assets.BenchmarkComponent", "attributes": {
        "name": "my_bench", "corpus": "docs", "questions": "questions.jsonl", "budget": 16,
        "solver": {"base_url": "http://127.0.0.1:9/v1", "model": "their-model", "api_key_env": "MY_BENCH_KEY"},
        **attributes}}))
    return folder


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = tmp_path / "my_project"
    defs = scratch_project(root)
    monkeypatch.syspath_prepend(str(root / "src"))
    yield root, defs
    for name in [m for m in sys.modules if m == "my_project" or m.startswith("my_project.")]:
        del sys.modules[name]


def test_a_declared_benchmark_is_this_package_s_stages_as_one_partition_with_its_own_data(project, tmp_path):
    root, defs = project
    declare(defs)
    loaded = load_from_defs_folder(path_within_project=root)
    graph = loaded.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == STAGES
    assert {graph.get(k).partitions_def.get_partition_keys()[0] for k in graph.get_all_asset_keys()} == {"my_bench"}
    assert {len(graph.get(k).partitions_def.get_partition_keys()) for k in graph.get_all_asset_keys()} == {1}
    assert {c.name for c in graph.asset_check_keys} >= {"chunks_valid", "pools_valid", "metrics_in_unit_range"}
    job = loaded.resolve_job_def("my_bench_job")
    assert {k.to_user_string() for k in job.asset_layer.selected_asset_keys} == STAGES
    # the declaration as registries under the project's data directory: the questions benchmark over the folder
    benchmarks = yaml.safe_load((root / "data" / "registry" / "my_bench" / "benchmarks.yaml").read_text())
    [entry] = benchmarks["benchmarks"]
    assert entry["monte_carlo"] == {"budget": 16} and entry["corpus"] == "my_bench"
    assert Path(entry["path"]) == defs / "my_bench" / "questions.jsonl"

    # its corpus built for real, into the project's data directory (chunking only: no model, no LLM)
    chunks = loaded.get_assets_def("corpus_chunks")
    with DagsterInstance.ephemeral() as instance:
        result = materialize([chunks], partition_key="my_bench", instance=instance)
    assert result.success
    table = pd.read_parquet(root / "data" / "parquet" / "corpus_chunks" / "my_bench.parquet")
    assert {"scheduling.md#0", "configuration.md#0"} <= set(table["chunk_id"]) and set(table["corpus"]) == {"my_bench"}
    # the solver endpoint's key is read through EnvVar: its name is in the config, never a value
    llm = loaded.get_assets_def("mc_trials").resource_defs["llm"].config_schema.as_field().default_value
    assert (llm["base_url"], llm["model"], llm["api_key"]) == ("http://127.0.0.1:9/v1", "their-model",
                                                               {"env": "MY_BENCH_KEY"})
    assert llm["cache_path"] == str(root / "data" / "llm_cache.sqlite")


def test_a_missing_corpus_folder_stops_the_load_naming_the_declaration(project):
    root, defs = project
    declare(defs, corpus="no_such_folder")
    with pytest.raises(Exception) as e:
        load_from_defs_folder(path_within_project=root)
    cause = e.value
    while cause is not None and not isinstance(cause, ConfigError):
        cause = cause.__cause__ or cause.__context__
    assert cause is not None, e.value
    assert "my_bench/defs.yaml" in str(cause) and "'no_such_folder' is not a folder" in str(cause)


@pytest.mark.slow   # two `dg` commands, each a Python process that imports Dagster (~20 s at a load of 8)
def test_dg_lists_the_component_and_scaffolds_its_defs_yaml(tmp_path):
    root = tmp_path / "my_project"
    scratch_project(root)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(bin_dir.parent),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(root / "src")])}
    listed = subprocess.run([str(bin_dir / "dg"), "list", "components", "--json"], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert "causal_assets.BenchmarkComponent" in listed.stdout
    scaffolded = subprocess.run([str(bin_dir / "dg"), "scaffold", "defs", "causal_assets.BenchmarkComponent",
                                 "my_bench"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert scaffolded.returncode == 0, scaffolded.stderr
    written = yaml.safe_load((root / "src" / "my_project" / "defs" / "my_bench" / "defs.yaml").read_text())
    assert written == {"type": "causal_assets.BenchmarkComponent", "attributes": {
        "name": "my_bench", "corpus": "docs", "questions": "questions.jsonl", "budget": 16}}
