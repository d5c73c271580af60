"""How sure a metric difference is: 95% intervals and a paired significance test against the best baseline.

* Interval of a mean (one retriever) and of a paired difference (retriever - baseline, query by query): the 2.5th and
  97.5th percentiles of 2,000 bootstrap resamples of the queries (seeded, so the report is reproducible).
* p-value: Fisher's paired randomization test (what `ranx.compare` runs with `stat_test="fisher"`): the per-query
  scores of the two systems are swapped at random 10,000 times, and p is the share of swaps whose mean difference is
  at least the observed one. Seeded numpy draws, so the same scores give the same p in every run: ranx's numba
  kernel draws in parallel threads its seed does not reach, and gave 0.0003 and 0.0006 for the same two runs (a gate
  near `alpha` could pass on one evaluation and fail on the next).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

N_BOOTSTRAP = 2000
N_PERMUTATIONS = 10000
ALPHA = 0.05


def bootstrap_ci(values: np.ndarray, n: int = N_BOOTSTRAP, seed: int = 0) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n, len(values)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


PERMUTATION_BLOCK = 2_000_000   # signs drawn at once: permutations x queries


def randomization_p(control: np.ndarray, treatment: np.ndarray, n: int = N_PERMUTATIONS, seed: int = 42) -> float:
    """Fisher's paired randomization test (module docstring): swapping a query's two scores flips the sign of its
    difference, so each of `n` seeded draws of signs gives one permuted mean difference."""
    control, treatment = np.asarray(control, dtype=float), np.asarray(treatment, dtype=float)
    if len(control) == 0 or np.array_equal(control, treatment):
        return 1.0
    diff = treatment - control
    observed = abs(diff.sum()) * (1 - 1e-12)   # the unpermuted draw counts despite rounding
    rng = np.random.default_rng(seed)
    block = max(1, PERMUTATION_BLOCK // len(diff))
    hits = 0
    for start in range(0, n, block):
        signs = rng.integers(0, 2, size=(min(block, n - start), len(diff)), dtype=np.int8) * 2 - 1
        hits += int((np.abs(signs @ diff) >= observed).sum())
    return hits / n


def best_baseline(means: dict[str, float], baselines: tuple[str, ...]) -> str | None:
    candidates = {r: v for r, v in means.items() if r in baselines and v == v}
    return max(candidates, key=candidates.get) if candidates else None


def compare_to_baseline(per_query: pd.DataFrame, baselines: tuple[str, ...], fill: float | None = 0.0) -> pd.DataFrame:
    """`per_query`: columns retriever, query_id, value (one metric, one split). One row per retriever: n, mean,
    its 95% interval, the best of `baselines`, the difference to it with its 95% interval, p and whether p < 0.05.
    `fill`: the value of a query a retriever has no row for (0: a ranking metric of a query it missed); None leaves
    such queries out (each mean over the retriever's own queries, each difference over the queries both have)."""
    wide = per_query.pivot_table(index="query_id", columns="retriever", values="value", aggfunc="first")
    if fill is not None:
        wide = wide.fillna(fill)
    means = wide.mean().to_dict()
    base = best_baseline(means, baselines)
    rows = []
    for retriever in per_query["retriever"].drop_duplicates():
        v = wide[retriever].dropna().to_numpy()
        lo, hi = bootstrap_ci(v)
        row = {"retriever": retriever, "n": len(v), "mean": means[retriever], "ci_low": lo, "ci_high": hi,
               "baseline": base}
        if base is not None and retriever != base:
            both = wide[[retriever, base]].dropna()
            v, b = both[retriever].to_numpy(), both[base].to_numpy()
            dlo, dhi = bootstrap_ci(v - b)
            p = randomization_p(b, v)
            row.update(delta=float((v - b).mean()) if len(v) else float("nan"), delta_low=dlo, delta_high=dhi,
                       p=p, significant=bool(p < ALPHA))
        rows.append(row)
    return pd.DataFrame(rows)


def format_comparison(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The comparison as the report prints it (strings, 4 decimals)."""
    out = []
    for r in table.to_dict("records"):
        delta = r.get("delta")
        has_delta = delta is not None and delta == delta
        out.append({
            "retriever": r["retriever"], "n": int(r["n"]),
            metric: f"{r['mean']:.4f}", "95% interval": f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]",
            f"Δ vs {r['baseline']}": f"{delta:+.4f}" if has_delta else "(baseline)" if r["retriever"] == r["baseline"] else "",
            "Δ 95% interval": f"[{r['delta_low']:+.4f}, {r['delta_high']:+.4f}]" if has_delta else "",
            "p (randomization)": (f"{r['p']:.4f}" + (" *" if r["significant"] else "")) if has_delta else "",
        })
    return pd.DataFrame(out)
