"""Query-likelihood reranking with the local language model (UPR: Sachan et al., "Improving Passage Retrieval with
Zero-Shot Question Generation", 2022): the first `depth` hits of a tuned base retriever are scored by how likely
the language model finds the *query* after reading the document,

    score = z(base score) + weight * z(log P(query | prompt(document)))

with z-scores over those `depth` hits; the hits below keep the base's order, and `weight = 0` is the base ranking.
The query is the continuation, so every candidate is judged on the same tokens, through the `llm` resource's
scorer and the call cache. `weight` and `depth` are tuned on the tune split. A scorer failure fails the run: a
document the model could not read is not a document it finds unlikely.
"""
from __future__ import annotations

import numpy as np

from causal_assets.core.index.search import CorpusIndex, Hit
from causal_assets.core.llm.errors import LLMError
from causal_assets.core.llm.scoring import Scorer, ScoreRequest
from causal_assets.core.retrievers.similarity import rerank_head, zscore

# The document, then the cue for the query. Generic on purpose: it names no benchmark's kind of query.
DEFAULT_PROMPT = "{document}\n\nA search query this text answers:"


def likelihood_request(index: CorpusIndex, query: str, chunk_id: str, prompt: str, max_doc_chars: int) -> ScoreRequest:
    """The request for log P(query | document): `prompt` with the document's first `max_doc_chars` characters (its
    title and text) in place of {document}, the query as the continuation. The reranker and the learned model's
    question-likelihood feature both ask here, so the same (query, document, prompt) hits the same cache entry."""
    document = index.text(chunk_id)[:max_doc_chars]
    return ScoreRequest(prompt=prompt.replace("{document}", document), continuations=(" " + query.strip(),))


class QueryLikelihoodReranker:
    name = "query_likelihood"

    def __init__(self, index: CorpusIndex, base, scorer: Scorer, depth: int = 20, weight: float = 0.5,
                 prompt: str = DEFAULT_PROMPT, max_doc_chars: int = 1500):
        if depth < 2:
            raise ValueError(f"depth must be >= 2, got {depth}")
        if weight < 0:
            raise ValueError(f"weight must be >= 0, got {weight}")
        if "{document}" not in prompt:
            raise ValueError(f"prompt {prompt!r} has no {{document}} placeholder")
        if max_doc_chars < 1:
            raise ValueError(f"max_doc_chars must be >= 1, got {max_doc_chars}")
        self.index, self.base, self.scorer = index, base, scorer
        self.depth, self.weight, self.prompt, self.max_doc_chars = depth, float(weight), prompt, max_doc_chars

    def request(self, query: str, chunk_id: str) -> ScoreRequest:
        return likelihood_request(self.index, query, chunk_id, self.prompt, self.max_doc_chars)

    def retrieve_many(self, queries: list[str], k: int, within: list[list[str]] | None = None) -> list[list[Hit]]:
        runs = self.base.retrieve_many(queries, max(k, self.depth), within)
        if self.weight == 0:
            return [hits[:k] for hits in runs]
        heads = [hits[: self.depth] for hits in runs]
        requests = [self.request(q, h.chunk_id) for q, head in zip(queries, heads) for h in head if q.strip()]
        # one batch for the whole run: the scorer orders it so prompts that share a beginning follow each other
        results = iter(self.scorer.score_many(requests))
        out = []
        for q, hits, head in zip(queries, runs, heads):
            if len(head) < 2 or not q.strip():
                out.append(hits[:k])
                continue
            logp = []
            for h in head:
                r = next(results)
                if isinstance(r, LLMError):
                    raise LLMError(f"query_likelihood: scoring chunk {h.chunk_id!r} failed: {r}") from r
                logp.append(r.best)
            mixed = zscore(np.array([h.score for h in head], dtype=np.float64)) + \
                self.weight * zscore(np.array(logp, dtype=np.float64))
            out.append(rerank_head(hits, mixed, k))   # the hits below `depth` follow in the base's order
        return out
