"""Keep the last fit when its inputs are the same: a stage that fits a model or tunes a configuration records the
version of its inputs beside the result, and the next materialization of the same version reads that result back
instead of paying for the fit again (a job selecting the whole tuning group fits nothing twice)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, TypeVar

import pandas as pd

from causal_assets.core.foundation.storage import read_parquet

T = TypeVar("T")


def reuse_or_fit(record: Path, version: str, fit: Callable[[], T], kept: Callable[[pd.DataFrame], T | None], *,
                 column: str = "version", columns: list[str] | None = None, refit: bool = False) -> tuple[T, bool]:
    """(value, reused): `kept(table)` when the table at `record` was written for `version` (every row's `column`
    holds it; `columns`: the table has exactly these) and `kept` finds what it names intact, else `fit()`.

    `kept` returns None for a result that is gone or was edited (its models, vectors or configuration file), and
    may raise TypeError or ValueError on a table this stage did not write: both fit again rather than fail. `refit`
    fits whatever is stored."""
    if not refit and record.exists():
        table = read_parquet(record)
        if len(table) and column in table.columns and set(table[column]) == {version} \
                and (columns is None or list(table.columns) == columns):
            try:
                value = kept(table)
            except (TypeError, ValueError):
                value = None
            if value is not None:
                return value, True
    return fit(), False
