"""Rank fusion of whole retrievers: weighted reciprocal rank fusion (RRF) of their rankings.

`FusionRetriever(members, c, weights)` runs every member over the same queries (and candidate sets) and scores a
document by sum_m weight_m / (c + rank_m), rank_m its 1-based rank in member m's ranking (absent: no term). Ties keep
the first member's order. It is the `fusion` retriever: e.g. the learned reranker and the entity-first retriever,
whose errors differ (the learned model misses the bridge paragraph the question does not name; entity-first
misses when the question's entities are not titles). Members and their parameters come from the same tuning run
(`tuned_retriever_configs`), `c` and the weights are searched on the tune split.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from causal_assets.core.index.search import CorpusIndex, Hit
from causal_assets.core.retrievers.entity_first.ranker import EntityFirstRanker
from causal_assets.core.retrievers.entity_first.retriever import compute_title_links
from causal_assets.core.retrievers.similarity import zscore
from causal_assets.core.text.entities import extract_query_entities


class FusionRetriever:
    name = "fusion"

    def __init__(self, index: CorpusIndex, members: Sequence[tuple[str, object]], c: float = 60.0,
                 weights: Mapping[str, float] | None = None, depth: int = 100):
        if len(members) < 1:
            raise ValueError("fusion needs at least one member retriever")
        if c < 0:
            raise ValueError(f"c must be >= 0, got {c}")
        unknown = set(weights or {}) - {n for n, _ in members}
        if unknown:
            raise ValueError(f"fusion weights name no member: {sorted(unknown)}")
        self.index, self.members, self.c, self.depth = index, list(members), float(c), depth
        self.weights = {n: float((weights or {}).get(n, 1.0)) for n, _ in members}

    def retrieve_many(self, queries: list[str], k: int, within: list[list[str]] | None = None) -> list[list[Hit]]:
        runs = [(n, r.retrieve_many(queries, max(self.depth, k), within)) for n, r in self.members]
        out = []
        for i in range(len(queries)):
            score: dict[str, float] = {}
            first: dict[str, int] = {}
            for n, run in runs:
                for h in run[i]:
                    score[h.chunk_id] = score.get(h.chunk_id, 0.0) + self.weights[n] / (self.c + h.rank)
                    first.setdefault(h.chunk_id, len(first))
            order = sorted(score, key=lambda d: (-score[d], first[d]))[:k]
            pos = [self.index.position[d] for d in order]
            out.append(self.index.hits(pos, [score[d] for d in order]))
        return out


class PairwiseTop2:
    """Re-selects the top 2 of a base ranking as the best *pair* among its first `pool` hits (multi-hop questions
    need two paragraphs that together cover the question, not two that each look most like it):

        pair score = z_i + z_j + coverage_weight * |entities(i) | entities(j)| / |question entities|
                     + link_weight * [i's text names j's title, or j's names i's]

    z = the base scores' z-score over the pool (rank-derived when the base's scores are not comparable: 1/rank);
    entities = the question's entities (`extract_query_entities`) found in a paragraph's title or text. The chosen
    pair leads (in base order), the rest of the base ranking follows. `coverage_weight = link_weight = 0` returns the
    base ranking unchanged."""

    name = "pairwise"

    def __init__(self, index: CorpusIndex, base, pool: int = 5, coverage_weight: float = 1.0,
                 link_weight: float = 0.5, use_ranks: bool = False):
        if pool < 2:
            raise ValueError(f"pool must be >= 2, got {pool}")
        self.index, self.base, self.pool = index, base, pool
        self.coverage_weight, self.link_weight, self.use_ranks = coverage_weight, link_weight, use_ranks

    def retrieve_many(self, queries: list[str], k: int, within: list[list[str]] | None = None) -> list[list[Hit]]:
        ranker = EntityFirstRanker()
        out = []
        for q, hits in zip(queries, self.base.retrieve_many(queries, max(k, self.pool), within)):
            head = hits[: self.pool]
            if len(head) < 2 or (self.coverage_weight == 0 and self.link_weight == 0):
                out.append(hits[:k])
                continue
            raw = np.array([1.0 / h.rank if self.use_ranks else h.score for h in head], dtype=np.float64)
            z = zscore(raw)
            entities = extract_query_entities(q)
            rows = [self.index.chunks.iloc[self.index.position[h.chunk_id]] for h in head]
            found = [set(ranker.compute_entity_coverage({"title": str(r["title"]), "content": str(r["text"])},
                                                        entities)[1]) for r in rows]
            links = compute_title_links([str(r["title"]) for r in rows], [str(r["text"]) for r in rows])
            best, pair = -np.inf, (0, 1)
            for i in range(len(head)):
                for j in range(i + 1, len(head)):
                    cover = len(found[i] | found[j]) / len(entities) if entities else 0.0
                    link = float(j in links[i] or i in links[j])
                    s = z[i] + z[j] + self.coverage_weight * cover + self.link_weight * link
                    if s > best + 1e-12:
                        best, pair = s, (i, j)
            chosen = [head[pair[0]], head[pair[1]]]
            rest = [h for h in hits if h.chunk_id not in {c.chunk_id for c in chosen}]
            ranked = (chosen + rest)[:k]
            out.append([Hit(h.chunk_id, float(len(ranked) - r), r + 1, h.title, h.kind) for r, h in enumerate(ranked)])
        return out
