"""The graph of a corpus: the code graph of its Python chunks, the entity graph of its text, or both, side by side,
for a corpus holding both (a folder of Markdown and Python files)."""
from __future__ import annotations

import pandas as pd

from causal_assets.core.graph.code_graph import build_code_graph
from causal_assets.core.graph.store import CODE_KINDS, EDGE_COLUMNS, NODE_COLUMNS
from causal_assets.core.graph.text_graph import build_text_graph


def code_chunks(chunks: pd.DataFrame) -> pd.Series:
    """Which chunks are code symbols (module, class, function, method): what the code graph is built from."""
    return chunks["kind"].isin(CODE_KINDS)


def is_code_corpus(chunks: pd.DataFrame) -> bool:
    """Code when every chunk is a code symbol (a Python package)."""
    return bool(not chunks.empty and code_chunks(chunks).all())


def build_graph(chunks: pd.DataFrame, kind: str = "auto") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The graph of a chunk frame: `kind` is "code", "text" or "auto": the code graph of the code chunks and the
    entity graph of the others, merged when the corpus has both. One kind for a mixed corpus left the other
    kind's chunks out of the graph, so causal search could never show them (a folder's Markdown page under a
    code graph)."""
    if kind == "code":
        return build_code_graph(chunks)
    if kind == "text":
        return build_text_graph(chunks)
    if kind != "auto":
        raise ValueError(f"build_graph: kind must be 'code', 'text' or 'auto', got {kind!r}")
    code = code_chunks(chunks)
    if code.all() and not chunks.empty:
        return build_code_graph(chunks)
    if not code.any():
        return build_text_graph(chunks)
    # node ids cannot collide: the text graph's are prefixed (chunk:, entity:, community:), code FQNs are not
    code_nodes, code_edges = build_code_graph(chunks[code])
    text_nodes, text_edges = build_text_graph(chunks[~code].reset_index(drop=True))
    return (pd.concat([code_nodes, text_nodes], ignore_index=True)[NODE_COLUMNS],
            pd.concat([code_edges, text_edges], ignore_index=True)[EDGE_COLUMNS])
