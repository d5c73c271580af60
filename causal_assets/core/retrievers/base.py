"""The retriever interface every ranking method implements, so evaluation and tuning treat them alike."""
from __future__ import annotations

from typing import Protocol

from causal_assets.core.index.search import Hit


class Retriever(Protocol):
    name: str

    def retrieve_many(self, queries: list[str], k: int, within: list[list[str]] | None = None) -> list[list[Hit]]:
        """Top-k hits per query; `within[i]` restricts query i to those chunk ids."""
        ...
