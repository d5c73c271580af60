"""The bound of one retriever param, as a `Kind` entry names it (`registry.retrievers`, `bounds`) and
`registry.retriever_params` checks it: a share in [0, 1], another weight from 0 to `MAX_WEIGHT`, a count (a whole
number as written, not `"20"`, `20.0` or `true`) within the bounds of `foundation/limits.py`. Pure data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from causal_assets.core.foundation.limits import MAX_HOPS, MAX_WEIGHT


@dataclass(frozen=True)
class Bound:
    low: float
    high: float
    whole: bool = False          # a count: an integer as written
    optional: bool = False       # null means the retriever's own "unset"

    def problem(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        if self.whole:
            if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
                return f"must be a whole number from {self.low:,} to {self.high:,}"
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not self.low <= value <= self.high:
            return f"must be a number in [{self.low:g}, {self.high:g}]" if self.high <= 1 else \
                f"must be a number from {self.low:g} to {self.high:,}"
        return None


SHARE = Bound(0, 1)
WEIGHT = Bound(0, MAX_WEIGHT)
HOPS = Bound(0, MAX_HOPS, whole=True)


def count(low: int, high: int, optional: bool = False) -> Bound:
    return Bound(low, high, whole=True, optional=optional)
