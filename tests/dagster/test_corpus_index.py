"""Real Dagster materializations of the corpus index on small real data (no mocks)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

from causal_assets.core.outputs.catalog import DuckDBCatalog
import pandas as pd
import pytest
import yaml
from dagster import DagsterInstance, Definitions, materialize

from causal_assets.core.index.search import CorpusIndex
from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
from causal_assets.defs.graph import graph_nodes_and_edges
from tests.core.test_storage import _hold_catalog

ROOT = Path(__file__).resolve().parents[2]
ASSETS = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary]


def _materialize(resources, partition, instance=None):
    result = materialize(ASSETS, resources=resources, partition_key=partition, instance=instance)
    assert result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {"chunks_valid", "embeddings_fresh_and_finite", "postings_consistent"}
    assert all(c.passed for c in checks.values()), {n: c.metadata for n, c in checks.items()}
    return result


def _meta(result, asset):
    mats = [e.materialization for e in result.get_asset_materialization_events()
            if e.materialization.asset_key.path[-1] == asset]
    return {k: v.value for k, v in mats[0].metadata.items()}


def test_definitions_load():
    from causal_assets.definitions import defs

    Definitions.validate_loadable(defs)
    assert {"corpus_index_job", "default_lineage_job"} <= {j.name for j in defs.jobs}


def test_definitions_load_with_a_corpus_that_has_no_benchmark(tmp_path):
    """A user's folder corpus (no benchmark of that name) must not break the code location: the lineage job then
    covers the corpus stages only. Partitions are read from the registries at import, so this loads in a fresh
    interpreter."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Notes\n\nDagster assets are stored as Parquet.\n")
    shipped = yaml.safe_load((ROOT / "causal_assets/registry/corpora.yaml").read_text())
    shipped["corpora"].append({"name": "mydocs", "loader": "folder", "path": str(docs)})
    registry = tmp_path / "corpora.yaml"
    registry.write_text(yaml.safe_dump(shipped))
    code = ("from dagster import Definitions\n"
            "from causal_assets.definitions import defs\n"
            "Definitions.validate_loadable(defs)\n"
            "job = defs.get_job_def('default_lineage_job')\n"
            "print(sorted(k.to_user_string() for k in job.asset_layer.executable_asset_keys))\n"
            "print(sorted(defs.get_job_def('corpus_index_job').partitions_def.get_partition_keys()))\n")
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "CAUSAL_ASSETS_CORPORA": str(registry)}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assets_line, partitions_line = done.stdout.strip().splitlines()[-2:]
    assert "corpus_chunks" in assets_line and "mc_labels" not in assets_line
    assert "mydocs" in partitions_line


@pytest.mark.slow
def test_scifact_index_incremental_and_searchable(resources, scifact_small):
    instance = DagsterInstance.ephemeral()
    first = _materialize(resources, "scifact", instance)
    m1 = _meta(first, "corpus_embeddings")
    assert m1["chunks"] == 120 and m1["newly_embedded"] == 120 and m1["cache_hits"] == 0

    second = _materialize(resources, "scifact", instance)
    m2 = _meta(second, "corpus_embeddings")
    assert m2["newly_embedded"] == 0 and m2["cache_hits"] == 120

    # Change one document: only its chunk is re-embedded.
    lines = (scifact_small / "corpus.jsonl").read_text().splitlines()
    doc = json.loads(lines[0])
    doc["text"] += " An added sentence."
    changed = scifact_small.parent / "scifact_changed"
    import shutil

    shutil.copytree(scifact_small, changed)
    (changed / "corpus.jsonl").write_text("\n".join([json.dumps(doc), *lines[1:]]) + "\n")
    registry = resources["corpus_registry"]
    text = open(registry.path).read().replace(str(scifact_small), str(changed))
    open(registry.path, "w").write(text)
    m3 = _meta(_materialize(resources, "scifact", instance), "corpus_embeddings")
    assert m3["newly_embedded"] == 1 and m3["cache_hits"] == 119

    base = resources["storage"].base_path
    index = CorpusIndex.load(base, "scifact")
    target = json.loads(lines[5])
    for method in ("bm25", "tfidf", "dense"):
        hits = index.search(target["title"], k=3, method=method)
        assert hits[0].chunk_id == target["_id"], method
    with DuckDBCatalog(resources["storage"].catalog_path).connect() as con:
        assert con.execute("select count(*) from corpus_chunks where corpus = 'scifact'").fetchone()[0] == 120
        assert con.execute("select count(distinct chunk_id) from corpus_embeddings").fetchone()[0] == 120


def test_default_code_corpus_and_hotpotqa_partitions(resources):
    _materialize(resources, "default")
    result = _materialize(resources, "hotpotqa")
    chunks = pd.read_parquet(f"{resources['storage'].base_path}/corpus_chunks/hotpotqa.parquet")
    assert len(chunks) == 30 and chunks["title"].str.len().gt(0).all()
    index = CorpusIndex.load(resources["storage"].base_path, "default", dense=False)
    hits = index.search("bidirectional shortest path", k=5)
    assert "networkx.algorithms.shortest_paths.unweighted.bidirectional_shortest_path" in [h.chunk_id for h in hits[:2]]
    assert _meta(result, "sparse_postings")["split_identifiers"] is False
    assert index.split_identifiers is True


@pytest.mark.slow
def test_run_succeeds_while_a_user_holds_the_catalog(resources):
    catalog = resources["storage"].catalog_path
    duckdb.connect(catalog).close()  # the file exists, as after any earlier run
    reader = _hold_catalog(catalog, 120)
    try:
        result = _materialize(resources, "hotpotqa")
        assert "deferred" in _meta(result, "corpus_chunks")["duckdb_view"]
    finally:
        reader.kill()
        reader.wait()
    from causal_assets.cli import main

    assert main(["--base-path", resources["storage"].base_path, "catalog", "--catalog-path", catalog]) == 0
    with DuckDBCatalog(catalog).connect() as con:
        assert con.execute("select count(*) from corpus_chunks").fetchone()[0] == 30


def test_cli_search(resources, capsys, monkeypatch):
    from causal_assets.cli import main

    # the registry the index was built from: under another one, the corpus's source differs from the one its chunks
    # were read from, and search would rebuild them
    monkeypatch.setenv("CAUSAL_ASSETS_CORPORA", resources["corpus_registry"].path)
    _materialize(resources, "hotpotqa")
    base = resources["storage"].base_path
    assert main(["--base-path", base, "search", "Neil Peart drummer", "--corpus", "hotpotqa", "-k", "2", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["title"] == "Neil Peart" and len(hits) == 2
    assert main(["--base-path", base, "search", "x", "--corpus", "missing"]) == 2
    assert "unknown corpus 'missing'" in capsys.readouterr().err


def test_cli_search_with_cascade_and_entity_first(resources, capsys, monkeypatch):
    from causal_assets.cli import main

    monkeypatch.setenv("CAUSAL_ASSETS_CORPORA", resources["corpus_registry"].path)
    _materialize(resources, "hotpotqa")
    # cascade and entity_first read the entity graph: built here with the test's registry (the CLI would build it
    # with the shipped one)
    assert materialize([*ASSETS, graph_nodes_and_edges], resources=resources, partition_key="hotpotqa",
                       selection=["graph_nodes", "graph_edges"]).success
    base = resources["storage"].base_path
    for retriever in ("cascade", "entity_first", "hybrid"):
        assert main(["--base-path", base, "search", "Which Canadian rock band released a song called Counterparts?",
                     "--corpus", "hotpotqa", "--retriever", retriever, "-k", "2", "--json"]) == 0
        hits = json.loads(capsys.readouterr().out)
        assert len(hits) == 2 and hits[0]["rank"] == 1
    assert main(["--base-path", base, "search", "  ", "--corpus", "hotpotqa"]) == 2


def test_chunks_rematerialized_alone_leave_an_index_that_is_refused_until_rebuilt(tmp_path):
    """A file added to a folder corpus and only corpus_chunks re-materialized: `search` returned the new chunk ids
    with the old texts' scores, and dense search died with "could not broadcast input array from shape (2,) into
    shape (3,)"; `build` said the index was there. Now the stale parts are refused on load and listed as missing,
    and materializing them again serves the new file."""
    from causal_assets.core.stored import needs
    from causal_assets.core.index.provenance import FINGERPRINT, StaleIndexError
    from causal_assets.resources import CorpusRegistry, ParquetIOManagerFactory, Storage

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Dijkstra\n\nDijkstra's algorithm finds shortest paths in weighted graphs.\n")
    (docs / "b.md").write_text("# Kruskal\n\nKruskal's algorithm builds a minimum spanning tree.\n")
    registry = tmp_path / "corpora.yaml"
    registry.write_text(yaml.safe_dump({"corpora": [{"name": "default", "loader": "folder", "path": str(docs)}]}))
    storage = Storage(base_path=str(tmp_path / "parquet"), catalog_path=str(tmp_path / "catalog.duckdb"),
                      reports_dir=str(tmp_path / "reports"))
    resources = {"storage": storage, "corpus_registry": CorpusRegistry(path=str(registry)),
                 "io_manager": ParquetIOManagerFactory(storage=storage)}
    base, wanted = storage.base_path, needs.required(dense=True)
    with DagsterInstance.ephemeral() as instance:
        _materialize(resources, "default", instance)
        assert needs.missing(base, "default", wanted) == []
        (docs / "c.md").write_text("# Greedy colouring\n\nGreedy colouring gives each vertex the lowest free colour.\n")
        assert materialize(ASSETS, resources=resources, partition_key="default", instance=instance,
                           selection=["corpus_chunks"]).success
        chunks = pd.read_parquet(f"{base}/corpus_chunks/default.parquet")
        assert len(chunks) == 3 and chunks[FINGERPRINT].nunique() == 1
        with pytest.raises(StaleIndexError, match="sparse_postings, sparse_vocabulary, corpus_embeddings were built "
                                                  "from another version of corpus_chunks"):
            CorpusIndex.load(base, "default")
        assert needs.missing(base, "default", wanted) == ["sparse_postings", "sparse_vocabulary", "corpus_embeddings"]
        assert materialize(ASSETS, resources=resources, partition_key="default", instance=instance,
                           selection=["corpus_embeddings", "sparse_postings", "sparse_vocabulary"]).success
    assert needs.missing(base, "default", wanted) == []
    index = CorpusIndex.load(base, "default")
    for method in ("bm25", "dense"):
        assert index.search("greedy colouring of a vertex", k=1, method=method)[0].chunk_id == "c.md#0", method
