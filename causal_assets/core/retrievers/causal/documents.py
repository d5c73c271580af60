"""A document as the causal retriever's answer models read it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContextDoc:
    """A document as an answer model sees it."""
    chunk_id: str
    text: str
    title: str = ""
    path: str = ""
    start_line: int = 0

    @property
    def label(self) -> str:
        return self.path or self.title or self.chunk_id
