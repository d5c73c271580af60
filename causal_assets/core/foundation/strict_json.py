"""JSON read as the user meant it: Python's json keeps the last of a key given twice in one object, silently, and
reads NaN and Infinity, which JSON does not have. Here both are refused, with the key or the value named."""
from __future__ import annotations

import json
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


def loads(text: str) -> Any:
    """`text` as one JSON document; json.JSONDecodeError for its syntax, DuplicateKey (a ValueError) for a key given
    twice in one object, ValueError for NaN or Infinity."""
    return DECODER.decode(text)
