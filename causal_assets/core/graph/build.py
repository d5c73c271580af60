"""The graph of a corpus: the code graph for a Python package's chunks, the entity graph for text."""
from __future__ import annotations

import pandas as pd

from causal_assets.core.graph.code_graph import build_code_graph
from causal_assets.core.graph.store import CODE_KINDS
from causal_assets.core.graph.text_graph import build_text_graph


def is_code_corpus(chunks: pd.DataFrame) -> bool:
    """Code when the chunks come from a Python package or are module/class/function/method chunks."""
    if chunks.empty:
        return False
    return bool((chunks["source"] == "python_package").any() or chunks["kind"].isin(CODE_KINDS).all())


def build_graph(chunks: pd.DataFrame, kind: str = "auto") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The graph of a chunk frame: `kind` is "code", "text" or "auto" (decided by `is_code_corpus`)."""
    if kind == "auto":
        kind = "code" if is_code_corpus(chunks) else "text"
    if kind == "code":
        return build_code_graph(chunks)
    if kind == "text":
        return build_text_graph(chunks)
    raise ValueError(f"build_graph: kind must be 'code', 'text' or 'auto', got {kind!r}")
