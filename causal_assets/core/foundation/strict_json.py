"""JSON read as the user meant it: Python's json keeps the last of a key given twice in one object, silently, reads
NaN and Infinity, which JSON does not have, and turns a number too large for a float (`1e999`) into infinity. Here
each is refused, with the key or the value named; `non_finite` finds such a number in YAML too."""
from __future__ import annotations

import json
import math
import reprlib
from typing import Any

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother = 80, 80


class DuplicateKey(ValueError):
    """A key given twice in one JSON object; `key` is the key."""

    def __init__(self, key: Any, message: str):
        super().__init__(message)
        self.key = key


def unique_keys(pairs: list[tuple]) -> dict:
    """json's object_pairs_hook: a key given twice in one object is refused. The error shows the object's first
    other plain keys, to find it by."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            shown = {pk: pv for pk, pv in pairs[:3] if pk != k and not isinstance(pv, (dict, list))}
            raise DuplicateKey(k, f"key {_REPR.repr(k)} given twice in one object"
                                  + (f" ({_REPR.repr(shown)[:120]}...)" if shown else ""))
        out[k] = v
    return out


def _no_constant(constant: str):
    raise ValueError(f"{constant} is not a JSON value")


# One document, or with raw_decode one element at a time: keys once per object, no NaN / Infinity.
DECODER = json.JSONDecoder(object_pairs_hook=unique_keys, parse_constant=_no_constant)


def non_finite(value: Any) -> tuple[str, float] | None:
    """(dotted path, number) of the first number in `value` that is NaN or infinite (`("hybrid.weight", nan)`,
    `("ks[1]", inf)`; "" for `value` itself), or None when every number is finite. Iterative: a deeply nested
    value costs no recursion."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path, item
        if isinstance(item, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(item))))
    return None


def loads(text: str) -> Any:
    """`text` as one JSON document; json.JSONDecodeError for its syntax, DuplicateKey (a ValueError) for a key given
    twice in one object, ValueError for NaN, Infinity or a number beyond a float's range."""
    value = DECODER.decode(text)
    bad = non_finite(value)
    if bad:
        raise ValueError(f"{bad[0] or 'the value'} is {bad[1]}: numbers must be finite")
    return value
