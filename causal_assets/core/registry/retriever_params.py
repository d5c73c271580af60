"""The bounds of a retriever's params (each kind's `bounds` in `registry.retrievers`): a benchmark's `retrievers:`
section and `search --params` are checked against them when they are read, before any run or LLM call, with one
error naming the field and the value.

A share (the hybrid's dense weight, the causal measures' weights, a decay) is a number in [0, 1]; another weight or
constant is a number from 0 to `MAX_WEIGHT`; a depth, a k, a pool or a length is a whole number as written (not
`"20"`, `20.0` or `true`) within the bounds of `foundation/limits.py` (`registry.bounds`). Without them
`hybrid: {weight: 7}` ranked by seven times the dense score minus six times BM25's, and `rrf: {depth: 0}` fused empty
rankings. Params a kind's bounds do not name are left to the retriever, which refuses what it does not take when it
is built. Pure data: the registry's validation imports nothing heavy.
"""
from __future__ import annotations

from typing import Any

from causal_assets.core.registry.retrievers import KINDS, RETRIEVERS, SHORTLISTS


def short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _at(params: dict[str, Any], dotted: str) -> list[tuple[str, Any]]:
    """(path, value) of each value `dotted` names in `params` (none where a section is absent or not a mapping)."""
    head, _, rest = dotted.partition(".")
    if head == "*":
        return [(str(k), v) for k, v in params.items()]
    if head not in params:
        return []
    if not rest:
        return [(head, params[head])]
    inner = params[head]
    return [(f"{head}.{p}", v) for p, v in _at(inner, rest)] if isinstance(inner, dict) else []


def params_problem(name: str, params: Any) -> tuple[str, str] | None:
    """(dotted field, what is wrong with its value) of the first param of a `name` retriever outside its bound,
    following what it is built over (fusion's members, a base, the causal shortlist's params); None when all are
    within. An unknown retriever name, or params that are not a mapping, is a problem too."""
    if name not in KINDS:
        return "", f"unknown retriever {name!r}; known: {', '.join(RETRIEVERS)}"
    if not isinstance(params, dict):
        return "", f"a retriever's params are a mapping, not {type(params).__name__}"
    for dotted, bound in KINDS[name].bounds.items():
        for path, value in _at(params, dotted):
            why = bound.problem(value)
            if why:
                return path, f"{why} (value: {short(value)})"
    k = KINDS[name]
    if k.combination and not isinstance(params.get(k.ingredients) or {}, dict):
        return k.ingredients, f"must be a mapping {{retriever name: its params}}, not {short(params[k.ingredients])}"
    if k.ingredients == "shortlist" and "shortlist" in params and params["shortlist"] not in SHORTLISTS:
        return "shortlist", f"unknown shortlist {short(params['shortlist'])}; known: {', '.join(SHORTLISTS)}"
    if k.ingredients == "shortlist":   # the causal retriever's own default shortlist where none is named
        params = {"shortlist": k.start.get("shortlist"), **params}
    for inner, inner_params in k.inner(params).items():
        found = params_problem(inner, inner_params if inner_params is not None else {})
        if found:
            where = f"{k.ingredients}.{inner}" if k.combination else "shortlist_params"
            return f"{where}.{found[0]}".rstrip("."), found[1]
    return None


def check_retrievers(retrievers: dict[str, Any], prefix: str = "retrievers") -> None:
    """ValueError "`prefix`.name.field: what (value: v)" for the first retriever param outside its bound."""
    for name, params in retrievers.items():
        found = params_problem(name, params if params is not None else {})
        if found:
            field = f"{prefix}.{name}.{found[0]}".rstrip(".")
            raise ValueError(f"{field}: {found[1]}")
