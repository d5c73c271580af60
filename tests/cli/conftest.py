"""Fixtures of the CLI tests: a directory of the test's own registries, data and Dagster instance, and the
environment that points `causal-assets` at it."""
from __future__ import annotations

import shutil

import pytest

from tests.dagster.procs import ROOT, init_instance


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    """The variables that point the CLI at the registries `tmp_path/corpora.yaml` and `tmp_path/benchmarks.yaml`
    (the test writes them), at `tmp_path`'s own data directory, and at an instance of its own there, configured as
    shipped (data/dagster_home/dagster.yaml: one `llm` slot)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "data" / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    init_instance(home)
    return {"CAUSAL_ASSETS_CORPORA": str(tmp_path / "corpora.yaml"),
            "CAUSAL_ASSETS_BENCHMARKS": str(tmp_path / "benchmarks.yaml"),
            "CAUSAL_ASSETS_BASE_PATH": str(tmp_path / "parquet"), "CAUSAL_ASSETS_CATALOG": str(tmp_path / "c.duckdb"),
            "CAUSAL_ASSETS_REPORTS": str(tmp_path / "reports"), "CAUSAL_ASSETS_QUERIES": str(tmp_path / "queries"),
            "CAUSAL_ASSETS_LLM_CACHE": str(tmp_path / "llm.sqlite"), "DAGSTER_HOME": str(home)}
