"""The combination strategy: fusion's members or a base, taken at their tuned params from the spec's list for the
kind (`fusion_members`, `pairwise_base`, `query_likelihood_base`), then coordinate ascent. Its train figure ranks
with the learned member's out-of-fold models, and its nested figure nests its ingredients' choice too
(`selection.FoldChoices`), so it inherits none of their train optimism."""
from __future__ import annotations

import numpy as np

from causal_assets.core.registry.retrievers import KINDS
from causal_assets.core.tuning.context import TuningContext
from causal_assets.core.tuning.selection import mean_per_query
from causal_assets.core.tuning.strategies.coordinate import search_space


def combination(ctx: TuningContext, name: str) -> None:
    space, given, fixed = ctx.start(name)
    kind = KINDS[name]
    listed = getattr(ctx.spec, f"{name}_{kind.ingredients}")   # the spec's field for the kind: `<name>_members`
    if kind.ingredients == "members":
        members = [m for m in listed if m in ctx.best]
        if len(members) < 2:
            ctx.log(f"{name}: needs two tuned members of {listed}, has {members}: skipped")
            return
        fixed = {**fixed, "members": {m: ctx.best[m]["params"] for m in members}}
        space = {k: v for k, v in space.items() if not k.startswith("weights.") or k.split(".", 1)[1] in members}
    else:
        base = next((b for b in listed if b in ctx.best), None)
        if base is None:
            ctx.log(f"{name}: none of {listed} was tuned: skipped")
            return
        if kind.scores == "always" and ctx.scorer is None:
            ctx.log(f"{name}: no log-probability scorer configured: skipped")
            return
        fixed = {**fixed, "base": {base: ctx.best[base]["params"]}}
    sub, _ = search_space(ctx, name, space, given, fixed)
    ctx.nested_of[name] = mean_per_query([chooser.nested(name, lambda params, r=r: ctx.run_point(name, params, sub, r))
                                          for r, chooser in enumerate(ctx.choices)])
    ctx.log(f"{name}: nested {np.mean(list(ctx.nested_of[name].values())):.4f} with its ingredients' choice "
            f"nested too")
