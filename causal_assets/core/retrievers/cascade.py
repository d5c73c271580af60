"""Cascade retrieval with an entropy-aware loop: TF-IDF -> dense re-rank -> graph expansion, repeated with wider
stages until the retrieved set's term entropy settles.

Each iteration widens the TF-IDF stage (chunks sharing no term with the query never pass), re-ranks it by cosine
with the query vector at `similarity_cutoff`, and expands over the graph through a `neighbors(chunk_id)` function
the graph stage supplies (none, no expansion). Graph documents score on the cosine scale, decayed by hops and edge
weights, so they never outrank the document they were reached from. The loop is always bounded: `max_iterations`
is checked first, and it stops when an iteration adds nothing or stage 1 is exhausted
(`metadata["termination_reason"]`). The defaults follow the design specification except where it could not work
(docs/decisions.md); the stages are described in docs/pipeline.md ("Retrievers").
"""
from __future__ import annotations

import math
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np
import scipy.sparse as sp

from causal_assets.core.index.search import CorpusIndex, Hit
from causal_assets.core.retrievers.cascade_config import PREBUILT_TFIDF, EntropyConfig, GraphConfig, RetrievalConfig
from causal_assets.core.retrievers.metadata_filter import MetadataFilter
from causal_assets.core.text.analyzer import analyze

Neighbors = Callable[[str], Iterable[tuple[str, str, float]]]


# --- Result ---------------------------------------------------------------------------------------------------

@dataclass
class RetrievalResult:
    documents: list[Hit]
    scores: list[float]
    metadata: dict[str, Any] = field(default_factory=dict)

    def get_metadata(self) -> dict[str, Any]:
        return self.metadata

    def __len__(self) -> int:
        return len(self.documents)


# --- Entropy --------------------------------------------------------------------------------------------------

class EntropyCalculator:
    """Shannon entropy (bits) of the term distribution of a set of documents, with a per-query history.

    The distribution is over document frequencies within the set: p(t) = (documents of the set containing t) /
    (sum over terms of the same). The prebuilt index stores TF-IDF weights, not raw counts, so term presence is
    what can be read straight from its postings (vectorised, no re-tokenising); raw CountVectorizer
    counts would need the text re-analysed per query. Normalised entropy divides by log2(distinct terms).

    Documents are either row positions in `term_matrix` (chunks x terms, CSR; what the retriever passes) or
    texts (analysed with the project analyzer and counted the same way: once per document).
    """

    def __init__(self, config: Optional[Union[RetrievalConfig, EntropyConfig]] = None,
                 term_matrix: sp.csr_matrix | None = None):
        if isinstance(config, RetrievalConfig):
            config = config.entropy
        self.config = config or EntropyConfig()
        self.term_matrix = term_matrix
        self.history: list[float] = []
        self.last_reason: str | None = None

    def term_counts(self, documents: Sequence[Union[int, str]]) -> np.ndarray:
        if len(documents) == 0:
            return np.zeros(0)
        if isinstance(documents[0], str):
            counts = Counter(t for d in documents for t in set(analyze(d)))
            return np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        if self.term_matrix is None:
            raise ValueError("row positions given but the calculator has no term_matrix")
        rows = np.asarray(documents, dtype=np.int64)
        m = self.term_matrix
        starts, ends = m.indptr[rows], m.indptr[rows + 1]
        # Column ids of every posting of the selected rows, gathered without a Python loop over documents.
        lengths = ends - starts
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        cols = m.indices[np.arange(lengths.sum()) + offsets]
        _, counts = np.unique(cols, return_counts=True)
        return counts.astype(np.float64)

    def calculate_entropy(self, documents: Sequence[Union[int, str]]) -> float:
        counts = self.term_counts(documents)
        counts = counts[counts > 0]
        if counts.size == 0:
            return 0.0
        p = counts / counts.sum()
        entropy = float(-np.sum(p * np.log2(p)))
        if self.config.use_normalized_entropy:
            max_entropy = math.log2(counts.size)
            entropy = entropy / max_entropy if max_entropy > 0 else 0.0
        return entropy

    def calculate_entropy_change(self, documents: Sequence[Union[int, str]]) -> float | None:
        """Entropy now minus the mean of the last `window_size` recorded values (None on the first call).
        Records the new value in `history`."""
        current = self.calculate_entropy(documents)
        window = self.history[-self.config.window_size:]
        self.history.append(current)
        return current - float(np.mean(window)) if window else None

    @property
    def current_entropy(self) -> float | None:
        return self.history[-1] if self.history else None

    def should_terminate(self, documents: Sequence[Union[int, str]], iteration: int) -> bool:
        """Whether the loop should stop after `iteration` (1-based); the reason is left in `last_reason`.

        Bounded: returning False for fewer than `min_documents` documents *before* checking `max_iterations`
        would loop forever when no iteration reaches `min_documents`, so `max_iterations` is the first rule (the entropy is still recorded, for the metadata)."""
        change = self.calculate_entropy_change(documents)
        cfg = self.config
        if iteration >= cfg.max_iterations:
            self.last_reason = "max_iterations"
            return True
        if len(documents) >= cfg.max_documents:
            self.last_reason = "max_documents"
            return True
        if len(documents) < cfg.min_documents:
            self.last_reason = None   # too few: try a wider iteration (bounded by the rule above)
            return False
        if change is None:
            self.last_reason = None
            return False
        if abs(change) <= cfg.threshold:
            self.last_reason = "entropy_converged"
            return True
        if cfg.terminate_on_decreasing_entropy and change < 0:
            self.last_reason = "entropy_decreasing"
            return True
        self.last_reason = None
        return False


# --- Graph expansion ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GraphHit:
    chunk_id: str
    score: float
    hop: int
    parent: str           # the node it was reached from (a seed or an earlier hop)
    relationship: str


class GraphExpander:
    """Breadth-first expansion from seed documents over `neighbors(node) -> [(neighbor, relationship, weight)]`.

    A node reached at hop h from parent p over an edge of weight w scores `score(p) * decay * min(w, 1)`, so a
    document scores `seed score * decay ** hop * product of the path's weights` (seed scores below 0 count as
    0). A node keeps its first (fewest-hop) discovery, with the best score among that hop's parents. Edges of a
    type outside `relationship_types` or lighter than `min_edge_weight` are not followed.

    `is_document(node)` tells chunks of the index from entity nodes (default: every node is a document);
    entity nodes are traversed only when `include_entity_nodes`, and are never returned. `accept(node)` decides
    whether a document may be returned (filters, `within`); a rejected document is still traversed, since a
    filter restricts the result, not the graph. Bounds: at most `max_nodes` documents are added, and each hop
    expands at most `max_nodes` nodes (the best-scored), so a hub cannot blow up the traversal.
    """

    def __init__(self, config: Optional[Union[RetrievalConfig, GraphConfig]] = None,
                 neighbors: Neighbors | None = None):
        if isinstance(config, RetrievalConfig):
            config = config.graph
        self.config = config or GraphConfig()
        self.neighbors = neighbors

    def expand(self, documents: Sequence[str], scores: Sequence[float],
               is_document: Callable[[str], bool] | None = None,
               accept: Callable[[str], bool] | None = None) -> list[GraphHit]:
        cfg = self.config
        if self.neighbors is None or cfg.max_hops == 0 or cfg.max_nodes == 0 or not documents:
            return []
        types = set(cfg.relationship_types) if cfg.relationship_types is not None else None
        is_document = is_document or (lambda _: True)
        accept = accept or (lambda _: True)
        seen: set[str] = set(documents)
        frontier: dict[str, float] = {}
        for d, s in zip(documents, scores):
            frontier[d] = max(frontier.get(d, 0.0), max(float(s), 0.0))
        found: list[GraphHit] = []
        for hop in range(1, cfg.max_hops + 1):
            level: dict[str, GraphHit] = {}     # insertion order = discovery order (deterministic ties)
            for node, node_score in sorted(frontier.items(), key=lambda kv: -kv[1]):
                for nbr, rel, weight in self.neighbors(node) or ():
                    if nbr in seen or weight < cfg.min_edge_weight or (types is not None and rel not in types):
                        continue
                    if not cfg.include_entity_nodes and not is_document(nbr):
                        continue
                    score = node_score * cfg.score_decay_factor * min(float(weight), 1.0)
                    if nbr not in level or score > level[nbr].score:
                        level[nbr] = GraphHit(nbr, score, hop, node, rel)
            if not level:
                break
            ranked = sorted(level.values(), key=lambda h: -h.score)   # stable: discovery order breaks ties
            seen.update(level)
            for h in ranked:
                if len(found) >= cfg.max_nodes:
                    return found
                if is_document(h.chunk_id) and accept(h.chunk_id):
                    found.append(h)
            frontier = {h.chunk_id: h.score for h in ranked[:cfg.max_nodes]}
        return found




# --- The retriever --------------------------------------------------------------------------------------------

class CascadeRetriever:
    name = "cascade"

    def __init__(self, index: CorpusIndex, config: Optional[RetrievalConfig] = None,
                 neighbors: Neighbors | None = None):
        if "tfidf" not in index.sparse:
            raise ValueError(f"corpus {index.corpus!r}: the cascade needs the TF-IDF index")
        if index.embeddings is None:
            raise ValueError(f"corpus {index.corpus!r} was loaded without embeddings; the cascade needs them")
        self.index = index
        self.neighbors = neighbors
        self.config = self._check(config or RetrievalConfig())
        # Index-derived structures, built once (not query caches): row access to the TF-IDF postings for the
        # entropy, title/kind arrays for hits, and the filter evaluator.
        self._tfidf = index.sparse["tfidf"]
        self._rows = self._tfidf.matrix.tocsr()
        self._titles = index.chunks["title"].astype(str).to_numpy()
        self._kinds = index.chunks["kind"].astype(str).to_numpy()
        self._filter = MetadataFilter(index.chunks, index.corpus)

    def _check(self, config: RetrievalConfig) -> RetrievalConfig:
        model = self.index.embedder.model_name
        if config.embedding.embedding_model != model:
            raise ValueError(f"embedding.embedding_model {config.embedding.embedding_model!r} differs from the "
                             f"model the index was embedded with ({model!r}); rebuild the index to change it")
        off = {k: getattr(config.tfidf, k) for k, v in PREBUILT_TFIDF.items()
               if (tuple(getattr(config.tfidf, k)) if k == "ngram_range" else getattr(config.tfidf, k)) != v}
        if off:
            warnings.warn(f"tfidf settings {off} are not honoured: the TF-IDF index is prebuilt "
                          f"({PREBUILT_TFIDF}); rebuild the index to change them", stacklevel=3)
        return config

    # -- persistence --
    def save(self, path: str | Path) -> Path:
        return self.config.save(path)

    def load(self, path: str | Path) -> "CascadeRetriever":
        self.config = self._check(RetrievalConfig.load(path))
        return self

    # -- helpers --
    def _allowed(self, filter_dict: dict | None, within: Sequence[str] | None) -> np.ndarray | None:
        """Boolean mask of chunks a query may return (None: all)."""
        mask = self._filter.mask(filter_dict) if filter_dict else None
        if within is not None:
            w = np.zeros(len(self.index.ids), dtype=bool)
            pos = [self.index.position[c] for c in within if c in self.index.position]
            w[np.asarray(pos, dtype=np.int64)] = True
            mask = w if mask is None else mask & w
        return mask

    @staticmethod
    def _top(positions: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
        """Indices into `positions` of the n best scores, best first, ties by chunk order."""
        if n <= 0 or len(positions) == 0:
            return np.zeros(0, dtype=np.int64)
        if n < len(scores):
            part = np.argpartition(-scores, n - 1)[:n]
        else:
            part = np.arange(len(scores))
        return part[np.lexsort((positions[part], -scores[part]))]

    def _hit(self, pos: int, score: float, rank: int) -> Hit:
        return Hit(str(self.index.ids[pos]), float(score), rank, self._titles[pos], self._kinds[pos])

    # -- retrieval --
    def retrieve(self, query: str, filter_dict: dict[str, Any] | None = None, max_documents: int | None = None,
                 within: Sequence[str] | None = None, query_vector: np.ndarray | None = None) -> RetrievalResult:
        """The cascade for one query. `query_vector` (the L2-normalised query embedding) skips encoding;
        `within` restricts the query to those chunk ids; `max_documents` defaults to `entropy.max_documents`."""
        result, _ = self._run(query, filter_dict, max_documents, within, query_vector)
        return result

    def _run(self, query, filter_dict, max_documents, within, query_vector):
        if not query or not query.strip():
            raise ValueError("query is empty")
        t_start = time.perf_counter()
        cfg = self.config
        max_documents = cfg.entropy.max_documents if max_documents is None else max_documents
        if max_documents < 1:
            raise ValueError("max_documents must be >= 1")
        q_time = 0.0
        if query_vector is None:
            t = time.perf_counter()
            query_vector = self.index.embedder.encode_queries([query])[0]
            q_time = time.perf_counter() - t
        qv = np.asarray(query_vector, dtype=np.float32)

        timings = dict.fromkeys(("tfidf_time", "embedding_time", "graph_time", "entropy_time"), 0.0)
        t = time.perf_counter()
        tfidf = self._tfidf.score(self.index.terms(query))
        allowed = self._allowed(filter_dict, within)
        ok = tfidf > 0 if allowed is None else (tfidf > 0) & allowed
        pool = np.flatnonzero(ok)              # every allowed chunk stage 1 could ever return
        pool_scores = tfidf[pool]
        timings["tfidf_time"] += time.perf_counter() - t

        entropy = EntropyCalculator(cfg.entropy, self._rows)
        expander = GraphExpander(cfg.graph, self.neighbors)
        position = self.index.position
        is_document = position.__contains__
        accept = is_document if allowed is None else (lambda c: c in position and bool(allowed[position[c]]))

        previous: set[int] = set()
        iteration, reason = 0, None
        cand = np.zeros(0, dtype=np.int64)
        cos = np.zeros(0, dtype=np.float32)
        docs: list[tuple[int, float, str]] = []   # (position, score, stage)
        while True:
            iteration += 1
            # Stage 1: TF-IDF pool widened with the iteration.
            t = time.perf_counter()
            n1 = cfg.tfidf.initial_k * iteration
            cand = pool[self._top(pool, pool_scores, n1)]
            timings["tfidf_time"] += time.perf_counter() - t

            # Stage 2: dense re-rank with cutoff.
            t = time.perf_counter()
            cos = self.index.embeddings[cand] @ qv
            keep = np.arange(len(cand)) if cfg.embedding.similarity_cutoff is None \
                else np.flatnonzero(cos >= cfg.embedding.similarity_cutoff)
            order = keep[self._top(cand[keep], cos[keep], cfg.embedding.similarity_top_k * iteration)]
            stage2 = [(int(cand[i]), float(cos[i]), "embedding") for i in order]
            timings["embedding_time"] += time.perf_counter() - t

            # Stage 3: graph expansion from the stage-2 documents.
            t = time.perf_counter()
            graph = expander.expand([str(self.index.ids[p]) for p, _, _ in stage2], [s for _, s, _ in stage2],
                                    is_document, accept)
            stage3 = [(position[h.chunk_id], h.score, "graph") for h in graph]
            timings["graph_time"] += time.perf_counter() - t

            docs = stage2 + stage3
            current = {p for p, _, _ in docs}

            # Stage 4: termination. The calculator checks max_iterations first (so the loop is bounded);
            # the two retriever-level rules below also bound the loop when documents stop changing.
            t = time.perf_counter()
            stop = entropy.should_terminate([p for p, _, _ in docs], iteration)
            timings["entropy_time"] += time.perf_counter() - t
            if stop:
                reason = entropy.last_reason
                break
            if len(cand) >= len(pool) and len(keep) <= cfg.embedding.similarity_top_k * iteration:
                # A wider iteration would see the same pool and keep the same documents.
                reason = "candidates_exhausted"
                break
            if iteration > 1 and current <= previous:
                reason = "no_new_documents"
                break
            previous = current

        # Final ranking: cosine for stage-2 documents, decayed seed cosine for graph documents.
        rank_of_stage = {"embedding": 0, "graph": 1}
        docs.sort(key=lambda d: (-d[1], rank_of_stage[d[2]], d[0]))
        docs = docs[:max_documents]
        hits = [self._hit(p, s, r + 1) for r, (p, s, _) in enumerate(docs)]
        metadata = {
            "iterations": iteration,
            "termination_reason": reason,
            "final_entropy": entropy.current_entropy if entropy.current_entropy is not None else 0.0,
            "entropy_history": list(entropy.history),
            **timings,
            "query_embedding_time": q_time,
            "total_time": time.perf_counter() - t_start,
            "n_tfidf_candidates": int(len(cand)),
            "n_embedding_documents": sum(1 for d in docs if d[2] == "embedding"),
            "n_graph_documents": sum(1 for d in docs if d[2] == "graph"),
            "sources": [d[2] for d in docs],
        }
        state = {"tfidf": tfidf, "allowed": allowed, "pool": pool, "pool_scores": pool_scores,
                 "cand": cand, "cos": cos, "qv": qv}
        return RetrievalResult(hits, [h.score for h in hits], metadata), state

    def retrieve_many(self, queries: list[str], k: int, within: list[list[str]] | None = None,
                      filter_dict: dict[str, Any] | None = None) -> list[list[Hit]]:
        """Retriever protocol. The cascade runs exactly as `retrieve` (config's `max_documents`, so a depth-10
        list is the prefix of a depth-100 one) and its documents come first, cut at k; when they are fewer
        than k the list is padded, so metrics@k compare with the other retrievers, with:
        (a) the rest of the last iteration's TF-IDF candidates in stage-2 (cosine) order, i.e. those under the
        cutoff or beyond similarity_top_k; (b) the remaining allowed chunks with a TF-IDF score, in TF-IDF
        order; (c) the remaining allowed chunks in cosine order. Padded hits carry the score of the tier they
        come from, so ranks, not scores, order a padded list (the evaluation runner ranks by `rank`)."""
        vectors = self.index.embedder.encode_queries(queries)
        out = []
        for i, (q, qv) in enumerate(zip(queries, vectors)):
            result, st = self._run(q, filter_dict, None, within[i] if within else None, qv)
            hits = list(result.documents[:k])
            if len(hits) < k:
                hits = self._pad(hits, st, k)
            out.append(hits)
        return out

    def _pad(self, hits: list[Hit], st: dict, k: int) -> list[Hit]:
        taken = np.zeros(len(self.index.ids), dtype=bool)
        taken[[self.index.position[h.chunk_id] for h in hits]] = True
        out = list(hits)

        def add(positions: np.ndarray, scores: np.ndarray) -> None:
            free = ~taken[positions]
            positions, scores = positions[free], scores[free]
            for j in self._top(positions, scores, k - len(out)):
                out.append(self._hit(int(positions[j]), float(scores[j]), len(out) + 1))
                taken[positions[j]] = True

        add(st["cand"], st["cos"])                                   # (a) stage-2 order
        if len(out) < k:
            add(st["pool"], st["pool_scores"])                       # (b) stage-1 order
        if len(out) < k:
            rest = np.flatnonzero(~taken if st["allowed"] is None else (~taken & st["allowed"]))
            if len(rest):
                add(rest, self.index.embeddings[rest] @ st["qv"])    # (c) cosine order
        return out
