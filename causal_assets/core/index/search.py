"""The retrieval API over a materialized corpus index: `CorpusIndex.load(base, corpus).search(query, k, method)`.

Methods: bm25, tfidf, dense (cosine on normalised MiniLM vectors). `within` restricts a search to a set of
chunk ids (e.g. the 10 paragraphs of one HotpotQA question) without building a separate index.

Whole-corpus searches take fast paths: sparse methods select the top k inside one compiled postings loop
(`SparseIndex.top_k_many`; a one-shot query goes through NumPy, `SparseIndex.top_k`), and dense search goes
through an approximate index (`ann.AnnIndex`, built on first use) once the corpus has `ann_config.min_chunks`
chunks. Restricted searches (`within`) are always exact.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from upath import UPath

from causal_assets.core.foundation.errors import CorpusError
from causal_assets.core.index.ann import AnnConfig, AnnIndex, exact_top_k
from causal_assets.core.index.dense import DEFAULT_BACKEND, DEFAULT_MODEL, Embedder, resolve_model_reference
from causal_assets.core.index.provenance import FINGERPRINT, chunks_fingerprint, require_current
from causal_assets.core.index.exact import INT8_SCAN_MIN, Int8Scan, single_thread_blas, top_positions
from causal_assets.core.index.sparse import SparseIndex
from causal_assets.core.foundation.storage import asset_path, read_parquet
from causal_assets.core.text.analyzer import analyze

METHODS = ("bm25", "tfidf", "dense")
MOMENTS_BLOCK = 65_536  # chunk vectors per float64 block when computing the dense score moments
FEW_QUERIES = 4         # exact dense search of up to this many queries goes query by query (see dense_top_k)

# Asset names of the corpus index; the storage layout is <base>/<asset>/<corpus>.parquet.
CHUNKS, EMBEDDINGS, POSTINGS, VOCABULARY = "corpus_chunks", "corpus_embeddings", "sparse_postings", "sparse_vocabulary"


def check_sparse_build(postings: pd.DataFrame, vocab: pd.DataFrame, corpus: str, n_chunks: int | None = None) -> None:
    """Refuse postings and a vocabulary of different builds (a new postings file beside an old vocabulary loads
    and silently returns wrong BM25 results), and postings pointing past the chunks. Tables written before build
    ids existed (no `build_id` column in either) are accepted."""
    ids = {}
    for name, frame in (("sparse_postings", postings), ("sparse_vocabulary", vocab)):
        ids[name] = sorted(set(frame["build_id"].astype(str))) if "build_id" in frame else None
    if ids["sparse_postings"] != ids["sparse_vocabulary"] or (ids["sparse_postings"] is not None
                                                              and len(ids["sparse_postings"]) > 1):
        raise CorpusError(f"corpus {corpus!r}: sparse_postings (build {ids['sparse_postings']}) and "
                          f"sparse_vocabulary (build {ids['sparse_vocabulary']}) are not from one build; "
                          "re-materialize sparse_postings and sparse_vocabulary together")
    if n_chunks is not None and len(postings) and int(postings["chunk_idx"].max()) >= n_chunks:
        raise CorpusError(f"corpus {corpus!r}: sparse_postings point at chunk {int(postings['chunk_idx'].max())} "
                          f"but corpus_chunks has {n_chunks} chunks; re-materialize the corpus index")


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
    ann_config: AnnConfig = field(default_factory=AnnConfig)

    def __post_init__(self) -> None:
        self.ids = self.chunks["chunk_id"].to_numpy()
        self.position = {cid: i for i, cid in enumerate(self.ids)}
        # Plain arrays: building a Hit must not go through pandas indexing (it dominated query time); lists of
        # them too, since indexing a list with an int is several times cheaper than indexing an object array.
        self.titles = self.chunks["title"].astype(str).to_numpy()
        self.kinds = self.chunks["kind"].astype(str).to_numpy()
        self._hit_fields = (self.chunks["chunk_id"].astype(str).tolist(), self.titles.tolist(), self.kinds.tolist())
        self._ann: AnnIndex | None = None
        self._scan: Int8Scan | None = None
        self._dense_moments: tuple[np.ndarray, np.ndarray] | None = None
        self._fingerprint: str | None = None

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the chunk table this index serves (`provenance`): what its graph must record too."""
        if self._fingerprint is None:
            self._fingerprint = chunks_fingerprint(self.chunks)
        return self._fingerprint

    @classmethod
    def load(cls, base: str | UPath, corpus: str, dense: bool = True,
             ann_config: AnnConfig | None = None, vectors: str | UPath | None = None) -> "CorpusIndex":
        """The materialized index of `corpus`; `vectors`: another table of its chunk vectors (same columns as
        `corpus_embeddings`, e.g. a benchmark's `tuned_embeddings`), whose model then embeds the queries."""
        chunks = read_parquet(asset_path(base, CHUNKS, corpus)).sort_values("chunk_idx").reset_index(drop=True)
        postings = read_parquet(asset_path(base, POSTINGS, corpus))
        vocab = read_parquet(asset_path(base, VOCABULARY, corpus))
        emb = read_parquet(vectors or asset_path(base, EMBEDDINGS, corpus)).sort_values("chunk_idx") if dense else None
        # every part built from these chunks, or refused (before anything is scored with it)
        fingerprint = chunks_fingerprint(chunks)
        parts = {POSTINGS: postings.get(FINGERPRINT), VOCABULARY: vocab.get(FINGERPRINT)}
        if emb is not None and (vectors is None or FINGERPRINT in emb):
            parts[EMBEDDINGS if vectors is None else str(vectors)] = emb.get(FINGERPRINT)
        require_current(corpus, fingerprint, parts)
        check_sparse_build(postings, vocab, corpus, len(chunks))
        sparse = {m: SparseIndex.from_frames(m, postings, vocab, len(chunks)) for m in vocab["method"].unique()}
        embeddings, model, reference, backend = None, DEFAULT_MODEL, None, None
        if dense:
            # whatever it records, a table whose rows are not these chunks is refused by name, not misaligned
            def same(col: str) -> bool:
                return col not in emb or bool((emb[col].to_numpy() == chunks[col].to_numpy()).all())

            if len(emb) != len(chunks) or not (same("chunk_id") and same("content_hash")):
                raise ValueError(f"{vectors or asset_path(base, EMBEDDINGS, corpus)}: {len(emb)} vectors do not "
                                 f"match the {len(chunks)} chunks of corpus {corpus!r} (re-materialize it)")
            embeddings = np.stack(emb["embedding"].to_numpy()).astype(np.float32)
            reference = emb["model"].iloc[0]
            model = resolve_model_reference(reference, vectors) if vectors is not None else reference
            # Queries are embedded by the backend that embedded the chunks (tables from before backends: torch).
            backend = str(emb["backend"].iloc[0]) if "backend" in emb else "torch"
        split = bool(json.loads(chunks["index_options"].iloc[0]).get("split_identifiers", False)) \
            if "index_options" in chunks else False
        embedder = Embedder(model, backend=backend or DEFAULT_BACKEND, reference=reference)
        index = cls(corpus, chunks, sparse, embeddings, split, embedder, ann_config or AnnConfig())
        index._fingerprint = fingerprint
        return index

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
            with single_thread_blas():  # one product: waking BLAS threads costs more than it saves
                return self.embeddings @ qv
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")

    @property
    def ann(self) -> AnnIndex | None:
        """The approximate dense index when the corpus is large enough for one (built on first use), else None."""
        if self.embeddings is None or len(self.ids) < self.ann_config.min_chunks:
            return None
        if self._ann is None:
            self._ann = AnnIndex.build(self.embeddings, self.ann_config)
        return self._ann

    def dense_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean vector and second-moment matrix of the chunk vectors: the mean and variance of a query's cosines
        over the whole corpus follow from them exactly (mean = m.q, E[(e.q)^2] = q'Sq) without scoring every chunk."""
        if self._dense_moments is None:
            # In float64 blocks: a float64 copy of every vector at once would be twice the vectors' own memory
            # (3 GB at 1M x 384).
            dim = self.embeddings.shape[1]
            total, second = np.zeros(dim), np.zeros((dim, dim))
            for start in range(0, len(self.embeddings), MOMENTS_BLOCK):
                e = self.embeddings[start:start + MOMENTS_BLOCK].astype(np.float64)
                total += e.sum(axis=0)
                second += e.T @ e
            self._dense_moments = (total / len(self.embeddings), second / len(self.embeddings))
        return self._dense_moments

    def hits(self, positions, scores) -> list[Hit]:
        """Hits for chunk positions (best first) with their scores; negative positions (no result) are skipped."""
        ids, titles, kinds = self._hit_fields
        pairs = [(p, s) for p, s in zip(np.asarray(positions).tolist(), np.asarray(scores).tolist()) if p >= 0]
        return [Hit(ids[p], s, r, titles[p], kinds[p]) for r, (p, s) in enumerate(pairs, 1)]

    @property
    def scan(self) -> Int8Scan | None:
        """The int8 scan index behind exact single-query search (built on first use, from `INT8_SCAN_MIN` chunks)."""
        if self.embeddings is None or len(self.ids) < INT8_SCAN_MIN:
            return None
        if self._scan is None:
            self._scan = Int8Scan(self.embeddings)
        return self._scan

    def dense_top_k(self, query_vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Whole-corpus dense top k per query vector: (positions, cosines), each (queries, k); approximate when
        the corpus has an ANN index, exact otherwise (ties by chunk position).

        Exact search takes one of two paths with the same results: a few queries go one by one (the certified
        int8 scan from `INT8_SCAN_MIN` chunks, else one float product on one BLAS thread); more queries go
        through blocked matrix products on every BLAS thread (`exact_top_k`)."""
        if self.ann is not None:
            return self.ann.search(query_vectors, k)
        k = min(k, len(self.ids))
        queries = np.ascontiguousarray(np.atleast_2d(query_vectors), dtype=np.float32)
        if len(queries) > FEW_QUERIES:
            positions = exact_top_k(self.embeddings, queries, k)
            return positions, np.einsum("qkd,qd->qk", self.embeddings[positions], queries)
        return self.dense_top_k_single(queries, k)

    def dense_top_k_single(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The one-query-at-a-time exact path of `dense_top_k` (public for the latency benchmark and tests)."""
        k = min(k, len(self.ids))
        positions, scores = np.zeros((len(queries), k), np.int64), np.zeros((len(queries), k), np.float32)
        scan = self.scan
        for i, qv in enumerate(queries):
            if scan is not None:
                positions[i], scores[i] = scan.top_k(qv, k)
                continue
            with single_thread_blas():
                all_scores = self.embeddings @ qv
            positions[i] = top_positions(all_scores, k)
            scores[i] = all_scores[positions[i]]
        return positions, scores

    def top_k(self, scores: np.ndarray, k: int, within: list[str] | None = None) -> list[Hit]:
        if within is not None:
            # a repeated id is one candidate (a ranking never lists a document twice)
            cand = np.array([self.position[c] for c in dict.fromkeys(within) if c in self.position], dtype=np.int64)
        else:
            cand = np.arange(len(scores))
        k = min(k, len(cand))
        if k <= 0:
            return []
        sub = scores[cand]
        part = np.argpartition(-sub, k - 1)[:k] if k < len(sub) else np.arange(len(sub))
        # Ties broken by chunk order, so results are deterministic.
        order = cand[part[np.lexsort((cand[part], -sub[part]))]]
        return self.hits(order, scores[order])

    def search(self, query: str, k: int = 10, method: str = "bm25", within: list[str] | None = None,
               one_shot: bool = False) -> list[Hit]:
        """`one_shot`: the process answers this one query (`causal-assets search`), so a sparse search scores in
        NumPy instead of loading the compiled kernel (~0.7 s once per process; per query NumPy is slower on large
        corpora: 0.16 / 2.3 / 23 ms against 0.03 / 0.3 / 3 ms at 5k / 100k / 1M chunks)."""
        if not query or not query.strip():
            raise ValueError("query is empty")
        if one_shot and method in self.sparse and within is None and k > 0:
            return self.hits(*self.sparse[method].top_k(self.terms(query), k))
        return self.search_many([query], k, method, [within] if within is not None else None)[0]

    def search_many(self, queries: list[str], k: int = 10, method: str = "bm25",
                    within: list[list[str]] | None = None) -> list[list[Hit]]:
        """Batch search; dense queries are embedded in one batch."""
        if method not in self.sparse and method != "dense":
            raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
        if within is None and k > 0:
            if method in self.sparse:
                top = self.sparse[method].top_k_many([self.terms(q) for q in queries], k)
                return [self.hits(p, s) for p, s in zip(top.positions, top.scores)]
            if self.embeddings is None:
                raise ValueError(f"corpus {self.corpus!r} was loaded without embeddings")
            positions, scores = self.dense_top_k(self.embedder.encode_queries(queries), k)
            return [self.hits(p, s) for p, s in zip(positions, scores)]
        vectors = self.embedder.encode_queries(queries) if method == "dense" else [None] * len(queries)
        return [self.top_k(self.scores(q, method, v), k, within[i] if within else None)
                for i, (q, v) in enumerate(zip(queries, vectors))]

    def text(self, chunk_id: str) -> str:
        row = self.chunks.iloc[self.position[chunk_id]]
        return f"{row['title']}\n{row['text']}" if row["title"] else row["text"]
