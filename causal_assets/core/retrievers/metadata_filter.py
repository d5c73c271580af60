"""Metadata filters of a retrieval (`filter_dict`): MongoDB-style operators on a chunk table's columns and on the keys
of its JSON `metadata` column, evaluated to a boolean mask over the chunks."""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

COLUMN_KEYS = ("chunk_id", "kind", "title", "corpus")   # other keys address the JSON metadata column
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")
_MISSING = object()


class MetadataFilter:
    """Vectorised `filter_dict` evaluation over every chunk of an index: a boolean mask.

    `{"key": value}` is equality; `{"key": {"$op": value, ...}}` combines operators with AND, as do several keys.
    Keys `chunk_id`, `kind`, `title`, `corpus` address those columns; any other key (or `metadata.<key>`) a key
    of the JSON `metadata` column. Semantics follow MongoDB: a chunk without the key fails every operator except
    `$ne`/`$nin`; `$gt/$gte/$lt/$lte` compare numbers with numbers and strings with strings (ISO dates compare
    correctly as strings), anything else fails. The metadata column is parsed once, on first use.
    """

    def __init__(self, chunks: pd.DataFrame, corpus: str = ""):
        self.chunks = chunks
        self.corpus = corpus
        self.n = len(chunks)
        self._metadata: list[dict] | None = None
        self._columns: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, pd.Series]] = {}

    def _column(self, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.Series]:
        """(raw object values with _MISSING, presence mask, float view with NaN, string view with NA) of a key."""
        if key in self._columns:
            return self._columns[key]
        if key.startswith("metadata."):
            key_md, is_column = key[len("metadata."):], False
        else:
            key_md, is_column = key, key in COLUMN_KEYS
        if is_column:
            if key in self.chunks:
                raw = self.chunks[key].to_numpy(dtype=object)
            elif key == "corpus":
                raw = np.full(self.n, self.corpus, dtype=object)
            else:
                raw = np.full(self.n, _MISSING, dtype=object)
        else:
            if self._metadata is None:
                col = self.chunks["metadata"] if "metadata" in self.chunks else [None] * self.n
                self._metadata = [json.loads(m) if isinstance(m, str) and m else (m if isinstance(m, dict) else {})
                                  for m in col]
            raw = np.empty(self.n, dtype=object)
            raw[:] = [m.get(key_md, _MISSING) for m in self._metadata]
        present = np.fromiter((v is not _MISSING for v in raw), dtype=bool, count=self.n)
        numeric = np.array([float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
                            for v in raw], dtype=np.float64)
        strings = pd.Series([v if isinstance(v, str) else None for v in raw], dtype="string")
        self._columns[key] = (raw, present, numeric, strings)
        return self._columns[key]

    def mask(self, filter_dict: dict[str, Any] | None) -> np.ndarray:
        out = np.ones(self.n, dtype=bool)
        for key, cond in (filter_dict or {}).items():
            ops = cond if isinstance(cond, dict) and cond and all(str(k).startswith("$") for k in cond) \
                else {"$eq": cond}
            raw, present, numeric, strings = self._column(key)
            for op, value in ops.items():
                out &= self._apply(op, value, raw, numeric, strings, present, key)
        return out

    @staticmethod
    def _equal(raw: np.ndarray, value: Any) -> np.ndarray:
        if isinstance(value, (list, tuple, dict, set)):   # numpy would broadcast a sequence
            return np.fromiter((v == value for v in raw), dtype=bool, count=len(raw))
        eq = raw == value
        return np.asarray(eq, dtype=bool) if isinstance(eq, np.ndarray) else np.full(len(raw), bool(eq))

    def _apply(self, op, value, raw, numeric, strings, present, key) -> np.ndarray:
        if op == "$eq":
            return present & self._equal(raw, value)
        if op == "$ne":
            return ~(present & self._equal(raw, value))
        if op in ("$in", "$nin"):
            if not isinstance(value, (list, tuple, set)):
                raise ValueError(f"filter {key!r}: {op} needs a list, got {value!r}")
            hit = np.zeros(self.n, dtype=bool)
            for v in value:
                hit |= present & self._equal(raw, v)
            return hit if op == "$in" else ~hit
        if op in ("$gt", "$gte", "$lt", "$lte"):
            compare = {"$gt": np.greater, "$gte": np.greater_equal, "$lt": np.less, "$lte": np.less_equal}[op]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                with np.errstate(invalid="ignore"):
                    return compare(numeric, float(value))
            if isinstance(value, str):
                return compare(strings, value).fillna(False).to_numpy(dtype=bool)
            raise ValueError(f"filter {key!r}: {op} needs a number or a string, got {value!r}")
        raise ValueError(f"filter {key!r}: unknown operator {op!r}; known: {', '.join(OPERATORS)}")
