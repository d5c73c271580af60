"""Answer models for causal retrieval (the `IAnswerModel` interface).

An answer model answers a query from a set of context documents and estimates the *distribution* of its answer
(`answer`, `answer_distribution`, `estimate_entropy` in bits), so that causal retrieval can measure how much a
document changes the answer and how much uncertainty it removes. `LLMAnswerModel` samples the LLM through the cached
`LLMClient` and clusters the answers by HotpotQA normalisation. `LexicalAnswerModel` is a WEAK, deterministic,
offline stand-in for tests and runs without an LLM: extractive (its answers are the documents' lines), with no rule
about what a cause looks like. Both are described in docs/on-demand.md ("The causal retriever").
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Protocol, Sequence, runtime_checkable

from causal_assets.core.retrievers.causal.documents import ContextDoc
from causal_assets.core.text.analyzer import analyze
from causal_assets.core.text.answers import normalize_answer
from causal_assets.core.text.entities import STOPWORDS as _ENTITY_STOPWORDS

UNKNOWN = ""  # the normalised "no answer" outcome


@runtime_checkable
class AnswerModel(Protocol):
    def answer(self, query: str, docs: Sequence[ContextDoc]) -> str: ...

    def answer_distribution(self, query: str, docs: Sequence[ContextDoc], n_samples: int | None = None
                            ) -> dict[str, float]: ...

    def estimate_entropy(self, query: str, docs: Sequence[ContextDoc]) -> float: ...


def entropy_bits(dist: dict[str, float]) -> float:
    return float(-sum(p * math.log2(p) for p in dist.values() if p > 0))


# Words of the question itself (why, does, what, ...): not evidence for any answer.
_QUERY_NOISE = frozenset(analyze(" ".join(_ENTITY_STOPWORDS), split_identifiers=True))
_CAUSAL_WORDS = frozenset(analyze("why cause causes fail fails failing error errors exception crash crashes bug "
                                  "broken wrong incorrect", split_identifiers=True))


def query_terms(query: str) -> list[str]:
    """Content terms of a query (identifiers split, stemmed, question words dropped), de-duplicated."""
    return list(dict.fromkeys(t for t in analyze(query, split_identifiers=True) if t not in _QUERY_NOISE))


def is_causal_query(query: str) -> bool:
    """A why/failure question: its answer is a cause (query analysis only; it changes no score)."""
    return bool(set(analyze(query, split_identifiers=True)) & _CAUSAL_WORDS)


_SENTENCE_SPLIT = re.compile(r"\n|(?<=[.!?])\s+(?=[A-Z`\"'(])")


def candidate_units(doc: ContextDoc) -> list[tuple[int, str]]:
    """(line number in the source file, or 0, text) of every line/sentence of a document."""
    out = []
    for i, line in enumerate(doc.text.split("\n")):
        lineno = doc.start_line + i if doc.start_line else 0
        for piece in _SENTENCE_SPLIT.split(line):
            piece = piece.strip()
            if piece:
                out.append((lineno, piece))
    return out


class LexicalAnswerModel:
    """Extractive, deterministic offline stand-in (weak; see the module docstring)."""

    def __init__(self, beta: float = 3.0, unknown_answers: int = 64):
        if unknown_answers < 1:
            raise ValueError("unknown_answers must be >= 1")
        self.beta = beta
        self.unknown_answers = unknown_answers

    def _clusters(self, query: str, docs: Sequence[ContextDoc]) -> tuple[dict[str, float], dict[str, str]]:
        """Cluster weight (best evidence) and a representative raw answer per normalised answer."""
        q = query_terms(query)
        if not q or not docs:
            return {}, {}
        qs = set(q)
        weights: dict[str, float] = {}
        raw: dict[str, str] = {}
        for doc in docs:
            doc_cov = len(qs & set(analyze(f"{doc.title}\n{doc.text}", True))) / len(qs)
            for _, unit in candidate_units(doc):
                cov = len(qs & set(analyze(unit, True))) / len(qs)
                if cov <= 0:
                    continue
                support = cov + 0.5 * doc_cov
                key = normalize_answer(unit)
                if not key:
                    continue
                w = math.expm1(self.beta * support)
                if w > weights.get(key, 0.0):
                    weights[key], raw[key] = w, unit
        return weights, raw

    def answer_distribution(self, query: str, docs: Sequence[ContextDoc], n_samples: int | None = None
                            ) -> dict[str, float]:
        """Exact distribution (n_samples is ignored); UNKNOWN ("") carries the unseen-answer mass."""
        weights, _ = self._clusters(query, docs)
        total = 1.0 + sum(weights.values())
        dist = {k: w / total for k, w in sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))}
        dist[UNKNOWN] = 1.0 / total
        return dist

    def answer(self, query: str, docs: Sequence[ContextDoc]) -> str:
        weights, raw = self._clusters(query, docs)
        if not weights:
            return ""
        best = min(weights, key=lambda k: (-weights[k], k))
        return raw[best] if weights[best] > 1.0 else ""  # no better than "unknown": no answer

    def estimate_entropy(self, query: str, docs: Sequence[ContextDoc]) -> float:
        """Entropy in bits; the unknown mass is spread uniformly over `unknown_answers` answers."""
        dist = self.answer_distribution(query, docs)
        p_u = dist.pop(UNKNOWN, 0.0)
        h = entropy_bits(dist)
        if p_u > 0:
            h += -p_u * math.log2(p_u / self.unknown_answers)
        return float(h)


SYSTEM_PROMPT = ("You answer questions about a code base or documents. Use only the context. "
                 "Reply with a short answer (a few words or one line of code), no explanation.")


class LLMAnswerModel:
    """The answer model behind causal retrieval, on a cached `LLMClient` (see the module docstring)."""

    def __init__(self, client, n_samples: int = 4, temperature: float = 0.7, max_tokens: int = 48,
                 max_doc_chars: int = 800, greedy_answer: bool = False):
        if n_samples < 1:
            raise ValueError("n_samples must be >= 1")
        self.client = client
        self.n_samples = n_samples
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_doc_chars = max_doc_chars
        self.greedy_answer = greedy_answer

    def messages(self, query: str, docs: Sequence[ContextDoc]) -> list[dict]:
        if docs:
            ctx = "\n\n".join(f"[{i + 1}] {d.label}\n{d.text[:self.max_doc_chars]}" for i, d in enumerate(docs))
            user = f"Context:\n{ctx}\n\nQuestion: {query}\nAnswer:"
        else:
            user = f"Question: {query}\nAnswer:"
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def answer(self, query: str, docs: Sequence[ContextDoc]) -> str:
        if self.greedy_answer:
            res = self.client.chat(self.messages(query, docs), temperature=0.0, max_tokens=self.max_tokens)
            return res.text.strip()
        samples = self.samples(query, docs)
        counts = Counter(normalize_answer(s) for s in samples)
        best = min(counts, key=lambda k: (-counts[k], [normalize_answer(s) for s in samples].index(k)))
        return next(s for s in samples if normalize_answer(s) == best)

    def samples(self, query: str, docs: Sequence[ContextDoc], n_samples: int | None = None) -> list[str]:
        n = n_samples or self.n_samples
        msgs = self.messages(query, docs)
        return [self.client.chat(msgs, sample_index=i, temperature=self.temperature,
                                 max_tokens=self.max_tokens).text.strip() for i in range(n)]

    def answer_distribution(self, query: str, docs: Sequence[ContextDoc], n_samples: int | None = None
                            ) -> dict[str, float]:
        counts = Counter(normalize_answer(s) for s in self.samples(query, docs, n_samples))
        n = sum(counts.values())
        return {k: c / n for k, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}

    def estimate_entropy(self, query: str, docs: Sequence[ContextDoc]) -> float:
        return entropy_bits(self.answer_distribution(query, docs))
