"""Build every index of a corpus from its chunks: the pure function behind the corpus index assets."""
from __future__ import annotations

import hashlib
import time

import numpy as np
import pandas as pd

from causal_assets.core.index.dense import Embedder, embed_incremental
from causal_assets.core.index.provenance import FINGERPRINT
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.index.sparse import SparseIndex, build_bm25, build_tfidf
from causal_assets.core.text.analyzer import analyze


def chunk_texts(chunks: pd.DataFrame) -> list[str]:
    """What the indexes see per chunk: title, newline, text (as `Chunk.embed_text`), vectorised over a frame."""
    return (chunks["title"].where(chunks["title"] == "", chunks["title"] + "\n") + chunks["text"]).tolist()


def tokenize_chunks(chunks: pd.DataFrame, split_identifiers: bool) -> list[list[str]]:
    return [analyze(t, split_identifiers) for t in chunk_texts(chunks)]


def build_sparse(chunks: pd.DataFrame, split_identifiers: bool) -> tuple[dict[str, SparseIndex], dict]:
    t0 = time.perf_counter()
    tokens = tokenize_chunks(chunks, split_identifiers)
    t1 = time.perf_counter()
    indexes = {"bm25": build_bm25(tokens), "tfidf": build_tfidf(tokens)}
    stats = {"analyze_s": t1 - t0, "build_s": time.perf_counter() - t1,
             "vocabulary": len(indexes["bm25"].vocab), "avg_terms_per_chunk": float(np.mean([len(t) for t in tokens]))}
    return indexes, stats


def sparse_build_id(postings: pd.DataFrame, vocab: pd.DataFrame) -> str:
    """A content hash of one sparse build: the vocabulary (method, term id, term) and the postings' shape. Written
    into both tables, checked on load: term ids are only meaningful with the vocabulary they were built with."""
    h = hashlib.sha256()
    for col in ("method", "term_id", "term"):
        h.update("\x1f".join(map(str, vocab[col].tolist())).encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
    h.update(f"{len(postings)}:{int(postings['chunk_idx'].sum()) if len(postings) else 0}".encode())
    h.update(np.ascontiguousarray(postings["weight"].to_numpy(np.float32)).tobytes()[:1 << 20])
    return h.hexdigest()[:16]


def sparse_frames(indexes: dict[str, SparseIndex], corpus: str, fingerprint: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(postings, vocabulary) of every method, both carrying the same `build_id` column (checked on load:
    `search.check_sparse_build`) and the fingerprint of the chunks they were built from (`provenance`)."""
    pairs = [idx.to_frames(corpus) for idx in indexes.values()]
    postings = pd.concat([p for p, _ in pairs], ignore_index=True)
    vocab = pd.concat([v for _, v in pairs], ignore_index=True)
    build = sparse_build_id(postings, vocab)
    return (postings.assign(build_id=build, **{FINGERPRINT: fingerprint}),
            vocab.assign(build_id=build, **{FINGERPRINT: fingerprint}))


def build_index(chunks: pd.DataFrame, corpus: str, split_identifiers: bool = False, dense: bool = True,
                embedder=None, cache=None):
    """An in-memory CorpusIndex straight from a chunks frame (as `chunks_to_frame` makes it): for scripts,
    notebooks and tests that do not go through Dagster. `cache` (an EmbeddingCache) makes re-runs cheap."""
    chunks = chunks.reset_index(drop=True)
    if "chunk_idx" not in chunks:
        chunks = chunks.assign(chunk_idx=range(len(chunks)))
    sparse, _ = build_sparse(chunks, split_identifiers)
    embedder = embedder or Embedder()
    vectors = None
    if dense:
        vectors, _ = embed_incremental(chunk_texts(chunks), chunks["content_hash"].tolist(), embedder, cache, corpus)
    return CorpusIndex(corpus, chunks, sparse, vectors, split_identifiers, embedder)
