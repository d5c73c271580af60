"""The coordinate strategy: coordinate ascent over the kind's space from its start point (its defaults, under what
the benchmark lists), on the train queries or their seeded sample (`max_queries`)."""
from __future__ import annotations

from typing import Any

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.registry.retrievers import KINDS
from causal_assets.core.tuning.context import TuningContext


def start_point(name: str, given: dict[str, Any], space: dict[str, list[Any]]) -> dict[str, Any]:
    """The kind's defaults, under the values the benchmark lists for parameters of the space."""
    return {**KINDS[name].start, **{k: v for k, v in given.items() if k in space}}


def coordinate(ctx: TuningContext, name: str) -> tuple[Benchmark, dict[str, Any]]:
    space, given, fixed = ctx.start(name)
    return search_space(ctx, name, space, given, fixed)


def search_space(ctx: TuningContext, name: str, space: dict[str, list[Any]], given: dict[str, Any],
                 fixed: dict[str, Any]) -> tuple[Benchmark, dict[str, Any]]:
    """(the queries searched, the best point's record)."""
    sub = ctx.sample(name)
    return sub, ctx.search(name, sub, space, fixed, start_point(name, given, space), ctx.measure_runs(name, sub))
