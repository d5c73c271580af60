"""Entity-description vectors for the local search, built once per graph (the `graph_entity_embeddings` asset) and
resumable: vectors are written to the embedding cache block by block, so a stopped build keeps what it embedded
and the next one embeds only the rest.

Entities are what the local search maps a question to: the entity nodes of a text graph, or the symbols (modules,
classes, functions, methods) of a code graph. Each is embedded as `name: description` (`entity_text`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from causal_assets.core.corpus.chunk import content_hash
from causal_assets.core.graph.store import CODE_KINDS
from causal_assets.core.index.dense import CACHE_BLOCK, DEFAULT_MODEL, EmbeddingCache, encode_resumable
from causal_assets.core.foundation.progress import Progress

TEXT_ENTITY = "entity"


def entity_vector_cache(root) -> EmbeddingCache:
    """The embedding cache of the entity vectors under `root` (the base path's `cache/embeddings`): the packaged
    model on the default backend, which is what `graph_entity_embeddings` embeds with."""
    return EmbeddingCache(root, DEFAULT_MODEL)


def entity_nodes(nodes: pd.DataFrame) -> pd.DataFrame:
    """The nodes the local search treats as entities: text-graph entities and code symbols (a corpus of Markdown
    and Python files has both; taking one kind only left the other kind's chunks out of every answer)."""
    return nodes[(nodes["node_type"] == TEXT_ENTITY) | nodes["node_type"].isin(CODE_KINDS)].reset_index(drop=True)


def entity_text(name: str, description: str) -> str:
    return f"{name}: {description}" if description else str(name)


def entity_texts(entities: pd.DataFrame) -> list[str]:
    """`name: description`; code symbols are named by their full name (node id), which is what users search for."""
    names = [nid if kind in CODE_KINDS else name
             for nid, kind, name in zip(entities["node_id"], entities["node_type"], entities["name"])]
    return [entity_text(n, d) for n, d in zip(names, entities["description"])]


def embed_entities(nodes: pd.DataFrame, encode: Callable[[list[str]], np.ndarray], cache, cache_name: str,
                   emit: Callable[[str], None] | None = None, block: int = CACHE_BLOCK) -> tuple[pd.DataFrame, dict]:
    """(frame of node_id, content_hash, embedding; stats). `cache` is an `EmbeddingCache`: vectors already in it
    are reused, new ones are saved under `cache_name` after every `block` texts (`encode_resumable`), with a
    progress line each time."""
    entities = entity_nodes(nodes)
    texts = entity_texts(entities)
    hashes = [content_hash(t) for t in texts]
    known = cache.load()
    todo = list(dict.fromkeys(h for h in hashes if h not in known))
    first = {}
    for h, t in zip(hashes, texts):
        first.setdefault(h, t)
    progress = Progress(len(todo), "embedding entity descriptions", emit, every_s=0.0)
    encode_resumable(todo, first, lambda texts, _before: encode(texts), known, cache, cache_name,
                     done=progress.update, block=block)
    if todo:  # this graph's vectors in one file (the parts written on the way are folded into it)
        own = list(dict.fromkeys(hashes))
        cache.save(cache_name, own, np.stack([known[h] for h in own]))
    vectors = np.stack([known[h] for h in hashes]).astype(np.float32) if hashes else np.zeros((0, 0), np.float32)
    frame = pd.DataFrame({"node_id": entities["node_id"], "content_hash": hashes, "embedding": list(vectors)})
    stats = {"entities": len(entities), "embedded": len(todo), "cache_hits": len(hashes) - len(todo),
             "progress": progress.lines[-1] if progress.lines else "nothing to embed"}
    return frame, stats
