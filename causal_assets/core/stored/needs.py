"""Which materialized assets a command (or the query inbox) needs for a corpus, and which of them are missing (no
Dagster import: a `search` over a built index must not pay for it)."""
from __future__ import annotations

from causal_assets.core.index.provenance import (recorded_fingerprint, stale, stored_chunks_fingerprint,
                                                 stored_fingerprints)
from causal_assets.core.foundation.errors import ParquetReadError
from causal_assets.core.foundation.storage import asset_path, parquet_column_values
from causal_assets.core.registry.corpora import CorpusSpec
from causal_assets.core.registry.fingerprint import SOURCE_COLUMN, source_change as changed_since

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
    """What to materialize: each asset of `assets` without its file or built from other chunks than
    `corpus_chunks` holds (`outdated`), with the other outputs of its multi-asset (a run killed between a
    multi-asset's two writes leaves one; Dagster cannot materialize the other alone)."""
    absent = [a for a in assets if not asset_path(base, a, corpus).exists()]
    absent += [a for a in outdated(base, corpus, assets) if a not in absent]
    todo = [m for g in GROUPS if set(g) & set(absent) for m in g]
    return todo + [a for a in absent if a not in todo]


def outdated(base, corpus: str, assets: list[str]) -> list[str]:
    """The materialized assets of `assets` built from another version of the corpus's chunks (or recording none:
    written before the index recorded its chunks; or unreadable), in the order given; [] when the chunks are not
    materialized or cannot be read (loading them then says why). A `corpus_chunks` that records no fingerprint of
    its own (written before it did) is listed too, when asked for: made again, it records one, and every load of it
    stops computing it from the whole table."""
    chunks_path = asset_path(base, CHUNKS[0], corpus)
    if not chunks_path.exists():
        return []
    try:
        recorded_by_chunks = recorded_fingerprint(stored_fingerprints(base, corpus, list(CHUNKS))[CHUNKS[0]])
        expected = recorded_by_chunks or stored_chunks_fingerprint(base, corpus)
    except ParquetReadError:
        return []
    parts = [a for a in assets if a not in CHUNKS]
    recorded = {}
    for part in parts:
        try:
            recorded.update(stored_fingerprints(base, corpus, [part]))
        except ParquetReadError:   # a damaged part: built again like an old one
            recorded[part] = None
    old = stale(expected, recorded)
    chunks = [a for a in assets if a in CHUNKS and not recorded_by_chunks]
    return chunks + [a for a in parts if a in old]


def source_change(base, corpus: str, spec: CorpusSpec | None) -> str | None:
    """What changed in the source of `corpus` (`spec`) since its `corpus_chunks` was read from it, in words; None
    when nothing did, when the chunks are not built, record no source (written before they did) or cannot be
    read. Stats first, contents only when they differ (`fingerprint.source_change`)."""
    path = asset_path(base, CHUNKS[0], corpus)
    if spec is None or not path.exists():
        return None
    try:
        recorded = recorded_fingerprint(parquet_column_values(path, SOURCE_COLUMN))
    except ParquetReadError:
        return None
    return changed_since(spec, recorded)


def rebuilt(assets: list[str]) -> list[str]:
    """What to materialize when the source changed: the chunks, and `assets` built again from them."""
    return [a for g in GROUPS for a in g if a in CHUNKS or a in assets] + \
        [a for a in assets if not any(a in g for g in GROUPS)]


def describe(base, corpus: str, todo: list[str]) -> str:
    """What `missing` found, in words: "missing: a, b; built from older chunks: c"."""
    old = outdated(base, corpus, todo)
    absent = [a for a in todo if a not in old]
    parts = [a for a in old if a not in CHUNKS]
    said = ([f"missing: {', '.join(absent)}"] if absent else []) + \
        (["corpus_chunks written before it recorded its fingerprint"] if len(parts) < len(old) else []) + \
        ([f"built from older chunks: {', '.join(parts)}"] if parts else [])
    return "; ".join(said)
