"""The answer-likelihood answer model: causal retrieval measured with an LLM's log-probabilities.

It reads the same teacher-forced log-probabilities as the Monte Carlo labels' ``qa_likelihood`` outcome
(`core.llm.scoring`: one prompt evaluation per request, no sampling), so its measurements are as repeatable as the
labels'. ``estimate_entropy`` is the question's surprisal given the documents, so the information contribution is
the pointwise mutual information of a document and the question (no answer needed); ``answer_probability`` gives
the counterfactual impact, 1 - P(answer | context without D) / P(answer | context). Prompts end in a plain cue, so
base models without a chat template score them; documents come in canonical order, so repeated sets hit the cache.
"""
from __future__ import annotations

import math
from typing import Sequence

from causal_assets.core.llm.errors import LLMError
from causal_assets.core.llm.scoring import ScoreRequest, Scorer
from causal_assets.core.retrievers.causal.answer_model import UNKNOWN
from causal_assets.core.retrievers.causal.documents import ContextDoc
from causal_assets.core.text.answers import normalize_answer

INSTRUCTION = ("Answer the question about the code base or documents below. Use only the context. "
               "Reply with a short answer (a few words or one line of code).")
LN2 = math.log(2.0)
ANSWER_STOP = ("\n",)   # the answer is one line: generation ends with it, not at max_answer_tokens
LEADING_BREAKS = 2      # line breaks a base model may open its answer with, each asked past once


class LikelihoodAnswerModel:
    """Answer model on a log-probability `Scorer` (module docstring). `entropy_is_surprisal`: its entropies are
    one observed question's surprisal, not an answer distribution's entropy, so the retriever scales information
    contributions by the largest among the candidates rather than by the no-context value."""

    entropy_is_surprisal = True

    def __init__(self, scorer: Scorer, max_doc_chars: int = 400, max_answer_tokens: int = 24):
        if max_doc_chars < 1 or max_answer_tokens < 1:
            raise ValueError("max_doc_chars and max_answer_tokens must be >= 1")
        self.scorer = scorer
        self.max_doc_chars = max_doc_chars
        self.max_answer_tokens = max_answer_tokens

    def context(self, docs: Sequence[ContextDoc]) -> str:
        if not docs:
            return f"{INSTRUCTION}\n\nContext documents:\n(no documents)\n\nQuestion:"
        body = "\n\n".join(f"[{i}] {d.label}\n{d.text[:self.max_doc_chars]}" for i, d in enumerate(docs, 1))
        return f"{INSTRUCTION}\n\nContext documents:\n{body}\n\nQuestion:"

    def answer_prompt(self, query: str, docs: Sequence[ContextDoc]) -> str:
        return f"{self.context(docs)} {query.strip()}\nAnswer:"

    def _logprob(self, prompt: str, continuation: str) -> float:
        result = self.scorer.score_many([ScoreRequest(prompt, (continuation,))])[0]
        if isinstance(result, LLMError):   # an infrastructure failure is not a measurement: never a 0
            raise result
        return float(result.best)

    def question_logprob(self, query: str, docs: Sequence[ContextDoc]) -> float:
        """log P(question | docs), nats."""
        return self._logprob(self.context(docs), " " + query.strip())

    def estimate_entropy(self, query: str, docs: Sequence[ContextDoc]) -> float:
        """The question's surprisal given the documents, bits (module docstring)."""
        return -self.question_logprob(query, docs) / LN2

    def answer(self, query: str, docs: Sequence[ContextDoc]) -> str:
        """The greedy answer's first non-empty line. Generation stops at the end of the line (a base model would go
        on with the next line until `max_answer_tokens`); a model that opens with a line break is asked again past
        it, at most `LEADING_BREAKS` times."""
        prompt = self.answer_prompt(query, docs)
        for _ in range(1 + LEADING_BREAKS):
            text = self.scorer.complete(prompt, self.max_answer_tokens, stop=ANSWER_STOP)
            if text.strip():
                return text.strip()
            prompt += text + "\n"
        return ""

    def answer_probability(self, query: str, docs: Sequence[ContextDoc], answer: str) -> float:
        """P(answer | question, docs) by teacher forcing; 0 for an empty answer (nothing to score)."""
        if not answer.strip():
            return 0.0
        return math.exp(self._logprob(self.answer_prompt(query, docs), " " + answer.strip()))

    def answer_distribution(self, query: str, docs: Sequence[ContextDoc], n_samples: int | None = None
                            ) -> dict[str, float]:
        """The greedy answer with its probability; the rest of the mass on the unknown outcome."""
        a = self.answer(query, docs)
        p = min(1.0, self.answer_probability(query, docs, a))
        key = normalize_answer(a)
        return {key: p, UNKNOWN: 1.0 - p} if key != UNKNOWN else {UNKNOWN: 1.0}
