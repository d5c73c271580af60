"""How long a corpus build takes: the seconds of each build step for chunks of given lengths on 2 idle cores, and the
estimate a build announces (the CLI before its run, or the run itself once it has chunked the source), which leaves
out the texts whose vectors are in the embedding cache and scales with the machine's load."""
from __future__ import annotations

import os
from collections.abc import Sequence

import pandas as pd

from causal_assets.core.graph.store import mostly_code
from causal_assets.core.index.build import chunk_texts
from causal_assets.core.index.dense import DEFAULT_MODEL, EmbeddingCache

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


def estimate(chunks: pd.DataFrame, todo: list[str], cache, backend: str,
             entity_chars: Sequence[int] | None = None) -> float:
    """Seconds to build `todo` from these chunks (`corpus_chunks` columns kind, title, text, content_hash) at the
    load now; `cache`: the embedding cache's directory, whose chunk texts are not counted; `backend`: the chunk
    embeddings' (`corpus_embeddings`); `entity_chars`: the lengths of the graph's entity texts not in the cache,
    where the graph is built already (else typical ones are counted per chunk)."""
    held = EmbeddingCache(cache, DEFAULT_MODEL, backend).hashes() if "corpus_embeddings" in todo else set()
    new_chunks = chunks[~chunks["content_hash"].isin(held)]
    seconds = build_seconds([len(t) for t in chunk_texts(chunks)], mostly_code(chunks["kind"]), todo, entity_chars,
                            [len(t) for t in chunk_texts(new_chunks)])
    # The rates are for idle cores; other work on the machine slows this build about in proportion.
    return seconds * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
