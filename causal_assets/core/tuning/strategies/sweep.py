"""The sweep strategy: the hybrid's dense share swept over precomputed score vectors (`tuning.fusion`), and with
candidate sets both BM25 statistics (corpus | candidates; ties keep corpus)."""
from __future__ import annotations

import time

import pandas as pd

from causal_assets.core.tuning.context import TuningContext
from causal_assets.core.tuning.fusion import sweep_fusion_weight


def sweep(ctx: TuningContext, name: str) -> None:
    t0 = time.perf_counter()
    space, given, fixed = ctx.start(name)
    bench = ctx.bench
    stats = ("corpus", "candidates") if bench.within is not None else ("corpus",)
    swept = pd.concat([sweep_fusion_weight(ctx.index, bench, metric=ctx.metric, k=ctx.k, within_stats=st)
                       for st in stats], ignore_index=True)
    ctx.scored_queries |= set(bench.query_ids())
    per = (time.perf_counter() - t0) / max(len(swept), 1)
    ctx.record(name, [({"weight": float(w), **({"within_stats": st} if bench.within is not None else {})}, float(v))
                      for w, v, st in zip(swept["weight"], swept["value"], swept["within_stats"])],
               "train", len(bench.query_ids()), [per] * len(swept), fixed, list(swept["per_query"]))
