"""A folder corpus with hostile files (a non-UTF-8 file name, a Python file too deep for the
parser, a 1,100-deep directory, a hard link to a file outside the root) indexes the good files and lists the rest;
the corpus change sensor keeps working."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, build_sensor_context, materialize

from causal_assets.core.registry.fingerprint import source_fingerprint
from causal_assets.core.corpus.folder import load_folder
from causal_assets.core.registry.corpora import CorpusSpec


def _remove_deep(root: Path) -> None:
    """Remove the deep chain bottom-up without recursion (shutil.rmtree, and so pytest's own tmp_path cleanup,
    raise RecursionError on it)."""
    chain = [root]
    while (chain[-1] / "d").is_dir():
        chain.append(chain[-1] / "d")
    for d in reversed(chain):
        for f in d.iterdir():
            if not f.is_dir() or f.is_symlink():
                f.unlink()
        if d != root:
            d.rmdir()


@pytest.fixture
def hostile(tmp_path):
    root = _hostile_folder(tmp_path)
    yield root
    _remove_deep(root)


def _hostile_folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text("# Shortest paths\n\nDijkstra finds shortest paths in weighted graphs.\n")
    (root / "ok.py").write_text("def add(a, b):\n    \"\"\"Add two numbers.\"\"\"\n    return a + b\n")
    bad_name = os.fsencode(root) + b"/bad\xff name.txt"
    with open(bad_name, "wb") as f:
        f.write(b"a file whose name is not UTF-8\n")
    (root / "deep_expr.py").write_text("x = " + "+".join(["1"] * 200_000) + "\n")
    deep = root
    for _ in range(1100):  # os.makedirs itself recurses too deep for this
        deep = deep / "d"
        deep.mkdir()
    (deep / "bottom.md").write_text("too deep\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("root:x:0:0:root:/root:/bin/bash\n")
    os.link(outside, root / "passwd.txt")
    return root


def test_folder_loader_skips_and_lists_each_hostile_file(hostile):
    root = hostile
    chunks, report = load_folder(root, "mydocs")
    texts = "\n".join(c.text for c in chunks)
    assert "Dijkstra" in texts and "def add" in texts
    assert "root:x:0:0" not in texts and "too deep" not in texts and "not UTF-8" not in texts
    assert report["skipped_bad_name"] == 1 and report["skipped_hardlink"] == 1
    assert report["skipped_too_deep"] == 1 and report["skipped_unparsable"] == 1
    listed = "\n".join(report["skipped"])
    assert "bad\\xff name.txt" in listed and "passwd.txt" in listed and "deep_expr.py" in listed
    listed.encode("utf-8")  # printable, storable


def test_corpus_chunks_step_and_change_sensor_survive_a_hostile_folder(hostile, tmp_path):
    from causal_assets.defs import automation
    from causal_assets.defs.corpus import corpus_chunks
    from causal_assets.resources import CorpusRegistry, ParquetIOManagerFactory, Storage

    root = hostile
    reg = tmp_path / "corpora.yaml"
    reg.write_text(yaml.safe_dump({"corpora": [{"name": "default", "loader": "folder", "path": str(root)}]}))
    with DagsterInstance.ephemeral() as instance:
        result = materialize([corpus_chunks], partition_key="default", instance=instance,
                             resources={"corpus_registry": CorpusRegistry(path=str(reg)),
                                        "io_manager": ParquetIOManagerFactory(storage=Storage(
                                            base_path=str(tmp_path / "parquet"),
                                            catalog_path=str(tmp_path / "catalog.duckdb"),
                                            reports_dir=str(tmp_path / "reports")))})
        assert result.success
        meta = result.asset_materializations_for_node("corpus_chunks")[0].metadata
        assert "bad\\xff name.txt" in meta["skipped_files"].value
    fp = source_fingerprint(CorpusSpec(name="mydocs", loader="folder", path=str(root)))
    assert fp != "missing"
    # The sensor ticks without RecursionError for a registry containing the deep folder.
    registry = {"corpus_registry": CorpusRegistry(path=str(reg))}
    with DagsterInstance.ephemeral() as instance:
        first = automation.corpus_change_sensor(build_sensor_context(instance=instance, resources=registry))
        (root / "new.md").write_text("a new file\n")
        os.utime(root / "new.md", (1, 1))
        second = automation.corpus_change_sensor(build_sensor_context(instance=instance, cursor=first.cursor,
                                                                      resources=registry))
    assert [r.partition_key for r in second.run_requests] == ["default"]


