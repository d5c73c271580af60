"""Resources in one place: storage (Parquet base path + DuckDB catalog) and the Parquet IO manager."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
from dagster import (ConfigurableIOManagerFactory, ConfigurableResource, InputContext, MetadataValue,
                     OutputContext, TableColumn, TableSchema, UPathIOManager)
from upath import UPath

from causal_assets.core.benchmarks import BenchmarkSpec, benchmark_registry_path, load_benchmark_registry
from causal_assets.core.catalog import DuckDBCatalog, view_source
from causal_assets.core.corpus.registry import CorpusSpec, load_corpus_registry, registry_path
from causal_assets.core.paths import PROJECT_ROOT
from causal_assets.core.storage import read_parquet, write_parquet_atomic

DEFAULT_BASE = os.environ.get("CAUSAL_ASSETS_BASE_PATH", str(PROJECT_ROOT / "data" / "parquet"))
DEFAULT_CATALOG = os.environ.get("CAUSAL_ASSETS_CATALOG", str(PROJECT_ROOT / "data" / "causal_assets.duckdb"))
DEFAULT_REPORTS = os.environ.get("CAUSAL_ASSETS_REPORTS", str(PROJECT_ROOT / "data" / "reports"))


class Storage(ConfigurableResource):
    """Where assets live: `base_path` (a local path or an fsspec URL such as s3://bucket/prefix, memory://x)
    and the DuckDB catalog file holding one view per asset."""

    base_path: str = DEFAULT_BASE
    catalog_path: str = DEFAULT_CATALOG
    catalog_lock_timeout_s: float = 2.0
    reports_dir: str = DEFAULT_REPORTS  # Markdown reports and plots (a local directory)

    @property
    def base(self) -> UPath:
        return UPath(self.base_path)

    def catalog(self) -> DuckDBCatalog:
        return DuckDBCatalog(self.catalog_path, self.catalog_lock_timeout_s)

    @property
    def reports_path(self) -> Path:
        return Path(self.reports_dir)

    def cache_dir(self, name: str) -> UPath:
        return self.base / "cache" / name


class CorpusRegistry(ConfigurableResource):
    """The corpus registry file (YAML). Partitions come from $CAUSAL_ASSETS_CORPORA or the shipped registry;
    pointing this resource elsewhere lets tests give a partition name a smaller source."""

    path: str = str(registry_path())

    def spec(self, name: str) -> CorpusSpec:
        specs = load_corpus_registry(self.path)
        if name not in specs:
            raise KeyError(f"{self.path}: no corpus named {name!r} (known: {sorted(specs)})")
        return specs[name]


class BenchmarkRegistry(ConfigurableResource):
    """The benchmark registry file (YAML/JSON); $CAUSAL_ASSETS_BENCHMARKS or the shipped one."""

    path: str = str(benchmark_registry_path())

    def spec(self, name: str) -> BenchmarkSpec:
        specs = load_benchmark_registry(self.path)
        if name not in specs:
            raise KeyError(f"{self.path}: no benchmark named {name!r} (known: {sorted(specs)})")
        return specs[name]


class ParquetIOManager(UPathIOManager):
    extension = ".parquet"

    def __init__(self, base_path: UPath, catalog: DuckDBCatalog | None):
        super().__init__(base_path=base_path)
        self.catalog = catalog

    def dump_to_path(self, context: OutputContext, obj: pd.DataFrame, path: UPath) -> None:
        if not isinstance(obj, pd.DataFrame):
            raise TypeError(f"{context.asset_key.to_user_string()}: expected a pandas DataFrame, got {type(obj).__name__}")
        write_parquet_atomic(obj, path)
        name = context.asset_key.path[-1]
        metadata = {
            "dagster/row_count": len(obj),
            "dagster/column_schema": TableSchema([TableColumn(str(c), str(t)) for c, t in obj.dtypes.items()]),
        }
        if self.catalog is not None:
            status = self.catalog.ensure_views({name: view_source(self._base_path, name, context.has_partition_key)})
            metadata["duckdb_view"] = f"{name} ({status[name]})"
            if status[name] == "deferred":
                context.log.warning(f"DuckDB catalog locked; view {name} will be created on the next refresh "
                                    "(`causal-assets catalog`)")
        context.add_output_metadata(metadata)

    def load_from_path(self, context: InputContext, path: UPath) -> pd.DataFrame:
        return read_parquet(path)


class ParquetIOManagerFactory(ConfigurableIOManagerFactory):
    storage: Storage

    def create_io_manager(self, context) -> ParquetIOManager:
        return ParquetIOManager(self.storage.base, self.storage.catalog())
