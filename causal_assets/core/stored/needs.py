"""Which materialized assets a command (or the query inbox) needs for a corpus, and which of them are missing (no
Dagster import: a `search` over a built index must not pay for it)."""
from __future__ import annotations

from collections.abc import Sequence

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


# What the "about N min" of a build is computed from (docs/operations.md, "Scaling"), measured on 2 idle cores by
# `python benchmarks/build_rates.py`. MiniLM-L6 (int8 on ONNX Runtime) embeds about 14,000 tokens a second whatever
# the texts are (code chunks, man pages, abstracts, paragraphs, entity descriptions: 13,000-15,700), a text counting
# its tokens up to the model's 256; a token is about 4 characters (3.2-4.5 measured, within 10% of the capped count
# for chunks). The graph of a text corpus takes time in proportion to its characters, a code graph (from the syntax
# trees) in proportion to its chunks.
EMBED_TOKENS_PER_S = 14_000.0
CHARS_PER_TOKEN = 4.0
EMBED_MAX_TOKENS = 256
# Before the graph exists: entities per chunk and tokens per entity (`name: description`), code symbols / text
# entities (the default corpus: 0.54 and 31; SciFact 5.6 and 47; HotpotQA 7.3 and 40).
ENTITIES_PER_CHUNK = {True: 0.55, False: 6.5}
ENTITY_TOKENS = {True: 31.0, False: 44.0}
SPARSE_S = (1.0, 0.0003)                           # seconds: fixed, per chunk
GRAPH_S = {True: (1.0, 0.0002), False: (1.0, 4.5e-6)}   # seconds: fixed, per chunk (code) or per character (text)
BUILD_RUN_S = 2.0      # a build run with nothing to embed: 2-3 s (its start, the Parquet read and written, the checks)


def embedding_tokens(chars: Sequence[int]) -> float:
    """The tokens the encoder runs over texts of these lengths (in characters), each capped at its maximum."""
    return float(sum(min(c / CHARS_PER_TOKEN, EMBED_MAX_TOKENS) for c in chars))


def build_parts(chunk_chars: Sequence[int], code: bool, todo: list[str], entity_chars: Sequence[int] | None = None,
                new_chunk_chars: Sequence[int] | None = None) -> dict[str, float]:
    """Seconds to materialize each of `todo`'s steps for a corpus whose chunks have these lengths (characters, as
    the indexes see them: title and text) on 2 idle cores; `code`: mostly code chunks; `entity_chars`: the lengths
    of the graph's entity texts not in the embedding cache, when the graph exists (else typical entities are
    counted per chunk); `new_chunk_chars`: those of the chunks not in the embedding cache (default: every chunk)."""
    n = len(chunk_chars)
    parts = {}
    if "corpus_embeddings" in todo:
        embedded = chunk_chars if new_chunk_chars is None else new_chunk_chars
        parts["corpus_embeddings"] = embedding_tokens(embedded) / EMBED_TOKENS_PER_S
    if "sparse_postings" in todo:
        parts["sparse_postings"] = SPARSE_S[0] + n * SPARSE_S[1]
    if "graph_nodes" in todo:
        fixed, rate = GRAPH_S[code]
        parts["graph_nodes"] = fixed + rate * (n if code else sum(chunk_chars))
    if "graph_entity_embeddings" in todo:
        tokens = (embedding_tokens(entity_chars) if entity_chars is not None
                  else n * ENTITIES_PER_CHUNK[code] * ENTITY_TOKENS[code])
        parts["graph_entity_embeddings"] = tokens / EMBED_TOKENS_PER_S
    return parts


def build_seconds(chunk_chars: Sequence[int], code: bool, todo: list[str], entity_chars: Sequence[int] | None = None,
                  new_chunk_chars: Sequence[int] | None = None) -> float:
    """The sum of `build_parts`, and the run's own start and writes."""
    return BUILD_RUN_S + sum(build_parts(chunk_chars, code, todo, entity_chars, new_chunk_chars).values())
