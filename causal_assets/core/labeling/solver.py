"""The blind solver (seed 001): an LLM that sees only the question and one subset of the candidate pool.

It is blind by construction: the prompt holds nothing but the subset's documents and the question, so any
success must come from those documents (or from the model's own knowledge, which the empty-subset trials
measure as the base rate).
"""
from __future__ import annotations

from dataclasses import dataclass

from causal_assets.core.llm.client import LLMClient, LLMResult

SYSTEM = ("You answer questions using only the context documents given. "
          "Answer in one short sentence. If the documents do not contain the answer, reply: unknown.")
ANSWER_FORMATS = {
    "fqn_match": "Answer with the fully qualified Python name (package.module.name) of the function or class.",
    "answer_f1": "Answer with the shortest phrase that answers the question.",
    "answer_containment": "Answer with the shortest phrase that answers the question.",
    "exact_match": "Answer with the exact answer only.",
}


def solver_messages(question: str, docs: list[tuple[str, str]], validator: str) -> list[dict]:
    """docs: [(title, text)] in pool order (the order never depends on relevance)."""
    if docs:
        context = "\n\n".join(f"[{i}] {title}\n{text}" for i, (title, text) in enumerate(docs, 1))
    else:
        context = "(no documents)"
    fmt = ANSWER_FORMATS.get(validator, ANSWER_FORMATS["answer_f1"])
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Context documents:\n{context}\n\nQuestion: {question}\n{fmt}"}]


@dataclass
class BlindSolver:
    client: LLMClient
    validator: str
    max_tokens: int = 48
    temperature: float = 0.0   # deterministic: the variation that matters is the subset, not sampling

    def attempt_many(self, question: str, subsets: list[list[tuple[str, str]]]) -> list[LLMResult | BaseException]:
        """One call per subset; infrastructure failures come back as exceptions in place (never as answers)."""
        conversations = [solver_messages(question, docs, self.validator) for docs in subsets]
        return self.client.chat_many(conversations, return_exceptions=True,
                                     max_tokens=self.max_tokens, temperature=self.temperature)
