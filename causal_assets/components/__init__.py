"""Dagster components of causal_assets, for a user's own `dg` project (`dg scaffold defs
causal_assets.BenchmarkComponent my_bench`); docs/components.md."""
from causal_assets.components.benchmark import BenchmarkComponent

__all__ = ["BenchmarkComponent"]
