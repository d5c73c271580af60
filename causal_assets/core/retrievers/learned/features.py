"""Query-time features of (query, candidate document) pairs: the input of the learned causal-relevance model
(`retriever.py`).

Candidates are the z-score hybrid's top `depth` (over the whole corpus, or a question's own candidates `within`,
where BM25 takes its statistics from the corpus or the candidates, `within_stats`). Every feature but one comes from
the corpus index (BM25 postings, dense vectors, titles, chunk kinds) and, where the corpus has one, its entity graph:
no LLM call, so the model can score at query time. The optional `question_likelihood_z` reads the candidate with the
solver (one scoring per candidate, through the call cache). The features, in `FEATURES` order, are listed in
docs/pipeline.md ("Retrievers").
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.index.sparse import build_bm25
from causal_assets.core.llm.errors import LLMError
from causal_assets.core.llm.scoring import Scorer
from causal_assets.core.retrievers.entity_first.retriever import compute_title_links, title_match_scores
from causal_assets.core.retrievers.query_likelihood import likelihood_request
from causal_assets.core.retrievers.similarity import _check_within_stats, sparse_scores, zscore
from causal_assets.core.text.analyzer import analyze
from causal_assets.core.text.entities import extract_query_entities
from causal_assets.core.text.titles import entity_key

KINDS = ("document", "paragraph", "module", "class", "function", "method", "text", "other")
FEATURES = ("bm25", "bm25_z", "bm25_rank", "bm25_share", "dense", "dense_z", "dense_rank", "dense_gap",
            "prior", "prior_rank", "prf_dense", "prf_dense_z", "title_bm25", "title_bm25_z", "term_coverage",
            "title_coverage", "entity_coverage", "title_match", "named_count", "title_match_rank", "graph_proximity",
            "doc_terms", "query_terms", "redundancy", *(f"kind_{k}" for k in KINDS), "bridge_from_named", "mentions_named", "bridge_prior")
NAMED = 0.9   # a title_match this strong means the question names the title (its full form or alias)
BRIDGE_FEATURES = ("bridge_from_named", "mentions_named", "bridge_prior")
QUESTION_LIKELIHOOD = ("question_likelihood_z",)
# The candidate (its title and text), then the cue for the question: the prompt the feature was measured with
# (docs/decisions.md, "Retrievers and tuning"); the first `QUESTION_DOC_CHARS` characters (a paragraph fits whole).
QUESTION_PROMPT = "{document}\n\nQuestion:"
QUESTION_DOC_CHARS = 3000
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*")


def query_entities(query: str) -> list[str]:
    """Rule-based entity spans plus code identifiers (snake_case, dotted, camelCase) of a query."""
    idents = [t.strip(".") for t in _IDENTIFIER.findall(query)
              if "_" in t or "." in t.strip(".") or any(c.isupper() for c in t[1:])]
    return list(dict.fromkeys(extract_query_entities(query) + idents))


class GraphProximity:
    """Hop distance from a query's entity nodes to chunk nodes, over the graph frames (`graph_nodes`,
    `graph_edges`) as one undirected sparse adjacency, so a query costs one multi-source BFS in C."""

    def __init__(self, nodes: pd.DataFrame, edges: pd.DataFrame, max_hops: int = 3):
        self.max_hops = max_hops
        keep = nodes[nodes["node_type"] != "community"].reset_index(drop=True)
        self._pos = {n: i for i, n in enumerate(keep["node_id"])}
        self._entity_key = entity_key
        self.node_of_chunk = {c: self._pos[n] for n, c in zip(keep["node_id"], keep["chunk_id"]) if c}
        # A query entity enters at nodes named by it: entity nodes by key, code nodes by name or FQN tail.
        self._by_name: dict[str, list[int]] = {}
        for n, name in zip(keep["node_id"], keep["name"]):
            for key in {entity_key(str(name)), entity_key(str(n).split(":", 1)[-1].rsplit(".", 1)[-1])}:
                if key:
                    self._by_name.setdefault(key, []).append(self._pos[n])
        e = edges[edges["source"].isin(self._pos) & edges["target"].isin(self._pos)]
        src = e["source"].map(self._pos).to_numpy()
        dst = e["target"].map(self._pos).to_numpy()
        n = len(keep)
        adj = sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n)).tocsr()
        self._adj = ((adj + adj.T) > 0).astype(np.float32).tocsr()

    def entry_nodes(self, entities: list[str]) -> list[int]:
        return sorted({p for e in entities for p in self._by_name.get(self._entity_key(e), [])})

    def proximity(self, entities: list[str], chunk_ids: list[str]) -> np.ndarray:
        """1 / hops per chunk (0: unreachable within max_hops, or no node)."""
        out = np.zeros(len(chunk_ids))
        sources = self.entry_nodes(entities)
        if not sources:
            return out
        dist = dijkstra(self._adj, directed=False, indices=sources, unweighted=True, limit=self.max_hops,
                        min_only=True)
        for i, c in enumerate(chunk_ids):
            p = self.node_of_chunk.get(c)
            if p is not None and np.isfinite(dist[p]):
                out[i] = 1.0 / max(dist[p], 1.0)
        return out


@dataclass
class Candidates:
    """One query's first-stage candidates (index positions, best first) and their feature rows."""
    positions: np.ndarray
    features: pd.DataFrame


class FeatureExtractor:
    """Features of first-stage candidates (module docstring). Build once per index; `graph` = (nodes, edges)."""

    def __init__(self, index: CorpusIndex, graph: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                 weight: float = 0.7, depth: int = 100, prf_weight: float = 0.7, prf_docs: int = 3,
                 max_hops: int = 3, sparse: str = "bm25", within_stats: str = "corpus",
                 question_likelihood: bool = False, scorer: Scorer | None = None):
        if index.embeddings is None:
            raise ValueError(f"corpus {index.corpus!r} was loaded without embeddings; the features need them")
        if question_likelihood and scorer is None:
            raise ValueError("question_likelihood features need a log-probability scorer (the `llm` resource's)")
        self.question_likelihood, self.scorer = question_likelihood, scorer
        self.features = (*FEATURES, *QUESTION_LIKELIHOOD) if question_likelihood else FEATURES
        self.index, self.weight, self.depth, self.sparse = index, weight, depth, sparse
        self.prf_weight, self.prf_docs = prf_weight, prf_docs
        _check_within_stats(within_stats)
        self.within_stats = within_stats   # BM25 statistics over `within`: the corpus's or the candidates' own
        chunks = index.chunks
        self._titles = chunks["title"].fillna("").astype(str).tolist()
        self._texts = chunks["text"].fillna("").astype(str).tolist()
        title_terms = [analyze(t, index.split_identifiers) for t in self._titles]
        # Title features are optional: a corpus without titles (code search) has no title field to index (bm25s
        # refuses an index without terms), and its title features are all 0.
        self._title_index = build_bm25(title_terms) if any(title_terms) else None
        bm25 = index.sparse[sparse]
        self._doc_terms = np.log1p(np.diff(bm25.matrix.tocsr().indptr))
        kinds = chunks["kind"].astype(str).where(chunks["kind"].isin(KINDS), "other")
        self._kind = pd.get_dummies(pd.Categorical(kinds, categories=KINDS)).to_numpy(np.float32)
        self.graph = GraphProximity(*graph, max_hops=max_hops) if graph is not None else None

    def settings(self) -> dict:
        return {"weight": self.weight, "depth": self.depth, "prf_weight": self.prf_weight,
                "prf_docs": self.prf_docs, "sparse": self.sparse, "within_stats": self.within_stats,
                "max_hops": self.graph.max_hops if self.graph is not None else None,
                "question_likelihood": self.question_likelihood}

    def candidates(self, query: str, query_vector: np.ndarray, within: list[str] | None = None) -> Candidates:
        index = self.index
        pop = np.arange(len(index.ids)) if within is None else \
            np.array([index.position[c] for c in dict.fromkeys(within) if c in index.position], dtype=np.int64)
        if len(pop) == 0:
            return Candidates(pop, pd.DataFrame(columns=list(self.features)))
        s_all = sparse_scores(index, query, self.sparse, pop, self.within_stats if within is not None else "corpus")
        d_all = index.scores(query, "dense", query_vector)[pop]
        s_z, d_z = zscore(s_all.astype(np.float64)), zscore(d_all.astype(np.float64))
        prior_all = self.weight * d_z + (1 - self.weight) * s_z
        order = np.lexsort((pop, -prior_all))[: self.depth]   # ties by chunk order, as CorpusIndex.top_k
        pos = pop[order]
        emb = index.embeddings
        top = emb[pos[: self.prf_docs]].mean(axis=0) if self.prf_docs else 0.0
        prf_q = query_vector + self.prf_weight * top
        prf_q = prf_q / (np.linalg.norm(prf_q) or 1.0)
        prf_all = emb[pop] @ prf_q
        terms = index.terms(query)
        title_all = self._title_index.score(terms)[pop] if self._title_index is not None else np.zeros(len(pop))
        s, d = s_all[order], d_all[order]
        feats = {
            "bm25": s, "bm25_z": s_z[order], "bm25_rank": _log_rank(s), "bm25_share": s / (s_all.max() or 1.0),
            "dense": d, "dense_z": d_z[order], "dense_rank": _log_rank(d), "dense_gap": d - d_all.max(),
            "prior": prior_all[order], "prior_rank": np.log1p(np.arange(len(pos))),
            "prf_dense": prf_all[order], "prf_dense_z": zscore(prf_all.astype(np.float64))[order],
            "title_bm25": title_all[order], "title_bm25_z": zscore(title_all.astype(np.float64))[order],
            "term_coverage": self._coverage(index.sparse[self.sparse].matrix, self.index.sparse[self.sparse].vocab,
                                            terms, pos),
            "title_coverage": self._coverage(self._title_index.matrix, self._title_index.vocab, terms, pos)
            if self._title_index is not None else np.zeros(len(pos)),
        }
        entities = query_entities(query)
        titles = [self._titles[p] for p in pos]
        feats["entity_coverage"] = self._entity_coverage(entities, pos)
        feats["title_match"] = title_match_scores(query, titles, entities) if self._title_index is not None \
            else np.zeros(len(pos))
        feats["named_count"] = np.full(len(pos), float((feats["title_match"] >= NAMED).sum()))
        feats["title_match_rank"] = _log_rank(feats["title_match"])
        feats["graph_proximity"] = self.graph.proximity(entities, [str(index.ids[p]) for p in pos]) \
            if self.graph is not None else np.zeros(len(pos))
        feats["doc_terms"] = self._doc_terms[pos]
        feats["query_terms"] = np.full(len(pos), float(len(set(terms))))
        sims = emb[pos] @ emb[pos].T
        feats["redundancy"] = np.array([sims[i, :i].max() if i else 0.0 for i in range(len(pos))])
        feats.update(self._bridges(pos, titles, feats["title_match"], zscore(prior_all[order]))
                     if within is not None else {k: np.zeros(len(pos)) for k in BRIDGE_FEATURES})
        if self.question_likelihood:
            feats["question_likelihood_z"] = zscore(self._question_logprobs(query, pos))
        frame = pd.DataFrame(feats)
        frame[[f"kind_{k}" for k in KINDS]] = self._kind[pos]
        return Candidates(pos, frame[list(self.features)].astype(np.float64))

    def _question_logprobs(self, query: str, pos: np.ndarray) -> np.ndarray:
        """log P(query | candidate) per candidate. A scoring failure fails the query: a document the model could
        not read is not a document that makes the question unlikely."""
        if not query.strip() or not len(pos):
            return np.zeros(len(pos))   # a blank question makes every candidate equally (un)likely
        results = self.scorer.score_many([likelihood_request(self.index, query, str(self.index.ids[p]), QUESTION_PROMPT,
                                                             QUESTION_DOC_CHARS) for p in pos])
        failed = next((r for r in results if isinstance(r, LLMError)), None)
        if failed is not None:
            raise failed
        return np.array([r.best for r in results], dtype=np.float64)

    def _bridges(self, pos: np.ndarray, titles: list[str], title_match: np.ndarray,
                 prior_z: np.ndarray) -> dict[str, np.ndarray]:
        links = compute_title_links(titles, [self._texts[p] for p in pos])   # links[j]: candidates j's text names
        n = len(pos)
        from_named, mentions, from_prior = np.zeros(n), np.zeros(n), np.full(n, prior_z.min() if n else 0.0)
        for j, targets in enumerate(links):
            for i in targets:
                from_named[i] = max(from_named[i], title_match[j])
                from_prior[i] = max(from_prior[i], prior_z[j])
                mentions[j] = max(mentions[j], title_match[i])
        return {"bridge_from_named": from_named, "mentions_named": mentions, "bridge_prior": from_prior}

    @staticmethod
    def _coverage(matrix: sp.csc_matrix, vocab: dict[str, int], terms: list[str], pos: np.ndarray) -> np.ndarray:
        """Share of the query's distinct terms each document contains (read off the postings columns)."""
        cols = sorted({vocab[t] for t in terms if t in vocab})
        n = len(set(terms))
        if not n or not cols:
            return np.zeros(len(pos))
        hits = np.asarray((matrix[:, cols].tocsr()[pos] > 0).sum(axis=1)).ravel()
        return hits / n

    def _entity_coverage(self, entities: list[str], pos: np.ndarray) -> np.ndarray:
        if not entities:
            return np.zeros(len(pos))
        pats = [re.compile(r"(?<!\w)" + re.escape(e) + r"(?!\w)", re.IGNORECASE) for e in entities]
        return np.array([sum(bool(p.search(f"{self._titles[i]}\n{self._texts[i]}")) for p in pats) / len(pats)
                         for i in pos])


def _log_rank(scores: np.ndarray) -> np.ndarray:
    """log1p of each score's rank (0 = best) among `scores`, ties by position."""
    ranks = np.empty(len(scores))
    ranks[np.argsort(-scores, kind="stable")] = np.arange(len(scores))
    return np.log1p(ranks)
