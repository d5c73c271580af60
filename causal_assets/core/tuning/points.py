"""Points of a search space: dotted parameter paths and the nested params a retriever takes, a point's key, the
seeded query sample, and the coordinate ascent every searched retriever uses."""
from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np

from causal_assets.core.registry.benchmarks import Benchmark, restrict


def nested(params: dict[str, Any]) -> dict[str, Any]:
    """{'graph.max_hops': 1} -> {'graph': {'max_hops': 1}}."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        node = out
        *head, last = key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def flat(params: dict[str, Any], space: dict[str, list[Any]], prefix: str = "") -> dict[str, Any]:
    """Inverse of `nested` down to the keys of `space` (a dict-valued parameter such as `weights` stays whole)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path not in space:
            out.update(flat(value, space, path + "."))
        else:
            out[path] = value
    return out


def point_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def sample_queries(bench: Benchmark, n: int | None, seed: int = 0) -> Benchmark:
    """`bench` restricted to a seeded sample of `n` of its judged queries (all of them when n is None or >=)."""
    qids = bench.query_ids()
    if n is None or n >= len(qids):
        return bench
    keep = sorted(np.random.default_rng(seed).choice(len(qids), n, replace=False))
    return restrict(bench, [qids[i] for i in keep])



def coordinate_search(space: dict[str, list[Any]], start: dict[str, Any], score: Callable[[dict[str, Any]], float],
                      passes: int) -> list[tuple[dict[str, Any], float]]:
    """Coordinate ascent over `space` from `start`: each parameter in turn through its values, keeping a strict gain,
    for up to `passes` passes (fewer when one changes nothing). Returns every scored point once, in order."""
    scored: dict[str, float] = {}
    order: list[tuple[dict[str, Any], float]] = []

    def value(point: dict[str, Any]) -> float:
        k = point_key(point)
        if k not in scored:
            scored[k] = score(point)
            order.append((dict(point), scored[k]))
        return scored[k]

    current = {**{k: v[0] for k, v in space.items()}, **{k: v for k, v in start.items() if k in space}}
    best = value(current)
    for _ in range(passes):
        improved = False
        for key, values in space.items():
            for v in values:
                cand = {**current, key: v}
                s = value(cand)
                if s > best + 1e-9:
                    best, current, improved = s, cand, True
        if not improved:
            break
    return order
