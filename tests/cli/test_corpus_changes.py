"""A folder corpus edited after it was built: `search`, `build` (and `ask`, `label` through the same check) notice
that its source changed, say so, and rebuild it; `search --no-build` searches the index as built and says it is
stale. Commands that build run in a new interpreter (`run_cli`), on a data directory of the test's own."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.cli.test_cli_ux import ROOT, run_cli


@pytest.fixture
def corpus(tmp_path) -> tuple[Path, dict[str, str]]:
    """A folder corpus `st` of two pages, and the environment that points the CLI at it and at tmp_path's own
    data directory and instance."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "boats.md").write_text("# Boats\n\nThe ferry to the island leaves at dawn from the northern pier.\n")
    (docs / "birds.md").write_text("# Birds\n\nHerons nest in the reeds beside the southern lake.\n")
    (tmp_path / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx"},
        {"name": "st", "loader": "folder", "path": str(docs)}]}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "data" / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return docs, {"CAUSAL_ASSETS_CORPORA": str(tmp_path / "corpora.yaml"), "DAGSTER_HOME": str(home),
                  "CAUSAL_ASSETS_BASE_PATH": str(tmp_path / "parquet"), "CAUSAL_ASSETS_CATALOG": "none",
                  "CAUSAL_ASSETS_REPORTS": str(tmp_path / "reports"), "CAUSAL_ASSETS_QUERIES": str(tmp_path / "q"),
                  "CAUSAL_ASSETS_LLM_CACHE": str(tmp_path / "llm.sqlite")}


def _search(env, query: str, *options: str):
    done = run_cli("search", query, "--corpus", "st", "-k", "1", *options, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.slow
def test_an_edited_and_an_added_file_are_announced_and_rebuilt(corpus):
    """Only `corpus_change_sensor`, under `dg dev`, compared a source with its chunks; without it, search (with or
    without --no-build) served the old chunks silently and `build` said "corpus 'st' is already built"."""
    docs, env = corpus
    built = run_cli("build", "st", "--index-only", env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "heron" in _search(env, "herons").stdout.lower()

    # touched without a change: nothing to say, nothing rebuilt
    os.utime(docs / "birds.md", (1e9, 1e9))
    done = _search(env, "herons", "--no-build")
    assert done.returncode == 0 and "changed" not in done.stderr, done.stderr

    (docs / "boats.md").write_text("# Boats\n\nThe ferry now leaves for Zanzibar at noon.\n")
    (docs / "owls.md").write_text("# Owls\n\nA tawny owl hunts voles in the orchard.\n")
    stale = _search(env, "zanzibar", "--no-build")   # searched as built, and said so
    assert f"corpus 'st': its source {docs} changed since its chunks were built (2 file(s) then, 3 now); " \
           "search --method bm25 uses the index as built" in stale.stderr, stale.stderr
    assert "`causal-assets build st` rebuilds it" in stale.stderr and "zanzibar" not in stale.stdout.lower()

    rebuilt = run_cli("build", "st", "--index-only", env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "already built" not in rebuilt.stderr, rebuilt.stderr
    assert "corpus 'st': its source" in rebuilt.stderr and "rebuilding from it" in rebuilt.stderr, rebuilt.stderr
    for query, page in (("zanzibar", "boats.md"), ("tawny owl", "owls.md")):
        found = _search(env, query, "--no-build")
        assert found.returncode == 0 and page in found.stdout and "changed" not in found.stderr, found
    assert "already built" in run_cli("build", "st", "--index-only", env=env).stderr

    # search without --no-build rebuilds on its own, and finds the new text
    (docs / "birds.md").write_text("# Birds\n\nFlamingos wade in the salt flats.\n")
    found = _search(env, "flamingos")
    assert found.returncode == 0 and "birds.md" in found.stdout, found.stderr
    assert "contents changed" in found.stderr and "rebuilding from it" in found.stderr, found.stderr
