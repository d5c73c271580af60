"""Fixtures of the CLI tests: a directory of the test's own registries, data and Dagster instance, and the
environment that points `causal-assets` at it."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.dagster.procs import ROOT, init_instance


def cli_environment(root: Path) -> dict[str, str]:
    """The variables that point the CLI at the registries `root/corpora.yaml` and `root/benchmarks.yaml` (the test
    writes them), at `root`'s own data directory, and at an instance of its own there, configured as shipped
    (data/dagster_home/dagster.yaml: one `llm` slot)."""
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "data" / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    init_instance(home)
    return {"CAUSAL_ASSETS_CORPORA": str(root / "corpora.yaml"),
            "CAUSAL_ASSETS_BENCHMARKS": str(root / "benchmarks.yaml"),
            "CAUSAL_ASSETS_BASE_PATH": str(root / "parquet"), "CAUSAL_ASSETS_CATALOG": str(root / "c.duckdb"),
            "CAUSAL_ASSETS_REPORTS": str(root / "reports"), "CAUSAL_ASSETS_QUERIES": str(root / "queries"),
            "CAUSAL_ASSETS_LLM_CACHE": str(root / "llm.sqlite"), "DAGSTER_HOME": str(home)}


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    """`cli_environment` of the test's own `tmp_path`."""
    return cli_environment(tmp_path)
