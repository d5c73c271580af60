"""Which materialized assets a command (or the query inbox) needs for a corpus, and which of them are missing (no
Dagster import: a `search` over a built index must not pay for it)."""
from __future__ import annotations

from causal_assets.core.storage import asset_path

# Assets materialized together (a multi-asset's outputs) are listed together.
CHUNKS = ("corpus_chunks",)
SPARSE = ("sparse_postings", "sparse_vocabulary")
DENSE = ("corpus_embeddings",)
GRAPH = ("graph_nodes", "graph_edges")
ENTITY_VECTORS = ("graph_entity_embeddings",)


def required(index: bool = True, dense: bool = False, graph: bool = False, entity_vectors: bool = False) -> list[str]:
    groups = [CHUNKS, SPARSE] if index else []
    groups += [DENSE] if dense else []
    groups += [GRAPH] if graph or entity_vectors else []
    groups += [ENTITY_VECTORS] if entity_vectors else []
    return [a for g in groups for a in g]


GROUPS = (CHUNKS, SPARSE, DENSE, GRAPH, ENTITY_VECTORS)


def missing(base, corpus: str, assets: list[str]) -> list[str]:
    """What to materialize: each asset of `assets` without its file, with the other outputs of its multi-asset (a
    run killed between a multi-asset's two writes leaves one; Dagster cannot materialize the other alone)."""
    absent = [a for a in assets if not asset_path(base, a, corpus).exists()]
    todo = [m for g in GROUPS if set(g) & set(absent) for m in g]
    return todo + [a for a in absent if a not in todo]
