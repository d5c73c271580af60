"""The retrieval API over a materialized corpus index: `CorpusIndex.load(base, corpus).search(query, k, method)`.

Methods: bm25, tfidf, dense (cosine on normalised MiniLM vectors). `within` restricts a search to a set of
chunk ids (e.g. the 10 paragraphs of one HotpotQA question) without building a separate index.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from upath import UPath

from causal_assets.core.index.dense import DEFAULT_MODEL, Embedder
from causal_assets.core.index.sparse import SparseIndex
from causal_assets.core.index.text import analyze
from causal_assets.core.storage import asset_path, read_parquet

METHODS = ("bm25", "tfidf", "dense")

# Asset names of the corpus index; the storage layout is <base>/<asset>/<corpus>.parquet.
CHUNKS, EMBEDDINGS, POSTINGS, VOCABULARY = "corpus_chunks", "corpus_embeddings", "sparse_postings", "sparse_vocabulary"


@dataclass(frozen=True)
class Hit:
    chunk_id: str
    score: float
    rank: int
    title: str = ""
    kind: str = ""


@dataclass
class CorpusIndex:
    corpus: str
    chunks: pd.DataFrame                   # ordered by chunk_idx
    sparse: dict[str, SparseIndex]
    embeddings: np.ndarray | None = None   # chunks x dim, L2-normalised
    split_identifiers: bool = False
    embedder: Embedder = field(default_factory=Embedder)

    def __post_init__(self) -> None:
        self.ids = self.chunks["chunk_id"].to_numpy()
        self.position = {cid: i for i, cid in enumerate(self.ids)}

    @classmethod
    def load(cls, base: str | UPath, corpus: str, dense: bool = True) -> "CorpusIndex":
        chunks = read_parquet(asset_path(base, CHUNKS, corpus)).sort_values("chunk_idx").reset_index(drop=True)
        postings = read_parquet(asset_path(base, POSTINGS, corpus))
        vocab = read_parquet(asset_path(base, VOCABULARY, corpus))
        sparse = {m: SparseIndex.from_frames(m, postings, vocab, len(chunks)) for m in vocab["method"].unique()}
        embeddings, model = None, DEFAULT_MODEL
        if dense:
            emb = read_parquet(asset_path(base, EMBEDDINGS, corpus)).sort_values("chunk_idx")
            embeddings = np.stack(emb["embedding"].to_numpy()).astype(np.float32)
            model = emb["model"].iloc[0]
        split = bool(json.loads(chunks["index_options"].iloc[0]).get("split_identifiers", False)) \
            if "index_options" in chunks else False
        return cls(corpus, chunks, sparse, embeddings, split, Embedder(model))

    def terms(self, query: str) -> list[str]:
        return analyze(query, self.split_identifiers)

    def scores(self, query: str, method: str, query_vector: np.ndarray | None = None) -> np.ndarray:
        """A score for every chunk (higher is better)."""
        if method in self.sparse:
            return self.sparse[method].score(self.terms(query))
        if method == "dense":
            if self.embeddings is None:
                raise ValueError(f"corpus {self.corpus!r} was loaded without embeddings")
            qv = query_vector if query_vector is not None else self.embedder.encode_queries([query])[0]
            return self.embeddings @ qv
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")

    def top_k(self, scores: np.ndarray, k: int, within: list[str] | None = None) -> list[Hit]:
        if within is not None:
            cand = np.array([self.position[c] for c in within if c in self.position], dtype=np.int64)
        else:
            cand = np.arange(len(scores))
        k = min(k, len(cand))
        if k <= 0:
            return []
        sub = scores[cand]
        part = np.argpartition(-sub, k - 1)[:k] if k < len(sub) else np.arange(len(sub))
        # Ties broken by chunk order, so results are deterministic.
        order = part[np.lexsort((cand[part], -sub[part]))]
        rows = self.chunks
        return [Hit(str(self.ids[i]), float(scores[i]), r + 1, str(rows.at[i, "title"]), str(rows.at[i, "kind"]))
                for r, i in enumerate(cand[order])]

    def search(self, query: str, k: int = 10, method: str = "bm25", within: list[str] | None = None) -> list[Hit]:
        if not query or not query.strip():
            raise ValueError("query is empty")
        return self.top_k(self.scores(query, method), k, within)

    def search_many(self, queries: list[str], k: int = 10, method: str = "bm25",
                    within: list[list[str]] | None = None) -> list[list[Hit]]:
        """Batch search; dense queries are embedded in one batch."""
        vectors = self.embedder.encode_queries(queries) if method == "dense" else [None] * len(queries)
        return [self.top_k(self.scores(q, method, v), k, within[i] if within else None)
                for i, (q, v) in enumerate(zip(queries, vectors))]

    def text(self, chunk_id: str) -> str:
        row = self.chunks.iloc[self.position[chunk_id]]
        return f"{row['title']}\n{row['text']}" if row["title"] else row["text"]
