"""The blind solver: an LLM that sees only the question and one subset of the candidate pool.

It is blind by construction: the prompt holds nothing but the subset's documents and the question, so any success
comes from those documents or from the model's own knowledge, which trials without the relevant documents measure
as the base rate. A trial's outcome is ``likelihood`` (the gold answer's log-probability in nats by teacher forcing,
best over accepted aliases: a document that makes the right answer likelier shows it even when the model would not
yet *say* it), ``qa_likelihood`` (that plus the question's own log-probability) or ``success`` (the greedy answer,
validated against the gold). All use :func:`solver_prompt`, so a likelihood trial scores exactly the context a
generating solver would see.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from causal_assets.core.llm.client import LLMClient, LLMResult
from causal_assets.core.llm.errors import LLMError
from causal_assets.core.llm.scoring import ScoreRequest, ScoreResult, Scorer

SYSTEM = ("You answer questions using only the context documents given. "
          "Answer in one short sentence. If the documents do not contain the answer, reply: unknown.")
ANSWER_FORMATS = {
    "fqn_match": "Answer with the fully qualified Python name (package.module.name) of the function or class.",
    "answer_f1": "Answer with the shortest phrase that answers the question.",
    "answer_containment": "Answer with the shortest phrase that answers the question.",
    "exact_match": "Answer with the exact answer only.",
}
ANSWER_CUE = "Answer:"


def _context(docs: Sequence[tuple[str, str]]) -> str:
    if not docs:
        return "Context documents:\n(no documents)\n\nQuestion:"
    return "Context documents:\n" + "\n\n".join(f"[{i}] {title}\n{text}" for i, (title, text) in enumerate(docs, 1)) \
        + "\n\nQuestion:"


def solver_user_text(question: str, docs: Sequence[tuple[str, str]], validator: str) -> str:
    """docs: [(title, text)] in pool order (the order never depends on relevance)."""
    fmt = ANSWER_FORMATS.get(validator, ANSWER_FORMATS["answer_f1"])
    return f"{_context(docs)} {question}\n{fmt}"


def question_span(question: str, docs: Sequence[tuple[str, str]]) -> tuple[int, int]:
    """Characters of :func:`solver_prompt` that hold the question (with its leading space): the part whose own
    log-probability the ``qa_likelihood`` outcome adds, scored in the same prompt evaluation as the answer."""
    start = len(f"{SYSTEM}\n\n{_context(docs)}")
    return start, start + 1 + len(question)


def document_cuts(docs: Sequence[tuple[str, str]]) -> tuple[int, ...] | None:
    """Offsets that cut :func:`solver_prompt` into its beginning, each document (from the space after its
    ``[i]``), each ``\n\n[i]`` between two documents, and the question with the answer cue: the pieces a
    separately-encoding scorer encodes each on its own (``ScoreRequest.pieces``). None without documents."""
    if not docs:
        return None
    cuts, at = [], len(f"{SYSTEM}\n\nContext documents:\n")
    for i, (title, text) in enumerate(docs, 1):
        if i > 1:
            cuts.append(at)
            at += len("\n\n")
        at += len(f"[{i}]")
        cuts.append(at)
        at += len(f" {title}\n{text}")
    cuts.append(at)
    return tuple(cuts)


def solver_messages(question: str, docs: Sequence[tuple[str, str]], validator: str) -> list[dict]:
    """The generating solver's chat conversation."""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": solver_user_text(question, docs, validator)}]


def solver_prompt(question: str, docs: Sequence[tuple[str, str]], validator: str) -> str:
    """The same conversation as plain text ending in the answer cue: what a likelihood trial scores the gold
    answer after (plain text works for base models without a chat template, e.g. Gemma-3-270M)."""
    return f"{SYSTEM}\n\n{solver_user_text(question, docs, validator)}\n{ANSWER_CUE}"


def answer_continuations(gold: str | Sequence[str], aliases: Sequence[str] = ()) -> tuple[str, ...]:
    """Accepted answers as continuations of :func:`solver_prompt` (leading space: the prompt ends on a token
    boundary after the cue). Duplicates and blanks dropped, order kept."""
    golds = [gold] if isinstance(gold, str) else list(gold)
    seen: dict[str, None] = {}
    for g in [*golds, *aliases]:
        g = str(g).strip()
        if g:
            seen.setdefault(" " + g, None)
    if not seen:
        raise ValueError("no gold answer to score")
    return tuple(seen)


@dataclass
class BlindSolver:
    """Generating solver: pass/fail outcomes from the model's greedy answer."""

    client: LLMClient
    validator: str
    max_tokens: int = 48
    temperature: float = 0.0   # deterministic: the variation that matters is the subset, not sampling

    def attempt_many(self, question: str, subsets: list[list[tuple[str, str]]]) -> list[LLMResult | BaseException]:
        """One call per subset; infrastructure failures come back as exceptions in place (never as answers)."""
        conversations = [solver_messages(question, docs, self.validator) for docs in subsets]
        return self.client.chat_many(conversations, return_exceptions=True,
                                     max_tokens=self.max_tokens, temperature=self.temperature)


@dataclass
class LikelihoodSolver:
    """Scoring solver: graded outcomes, the gold answer's log-probability given each subset, and with
    ``with_question`` also the question's own log-probability given the subset (what the ``qa_likelihood``
    outcome adds: how well the documents account for the question's premises -- its entities and relations --
    which is where a multi-hop question's first-hop document shows its effect on a small solver)."""

    scorer: Scorer
    validator: str
    # the documents encoded each on its own (``monte_carlo.documents: separate``), not jointly: see
    # core/llm/separate.py
    separate_documents: bool = False

    def score_many(self, question: str, continuations: tuple[str, ...], subsets: list[list[tuple[str, str]]],
                   with_question: bool = False) -> list[ScoreResult | LLMError]:
        """One scoring request per subset: the answer's log-probability after :func:`solver_prompt`, and with
        ``with_question`` the question's own (``span_logprob``) read off the same prompt evaluation."""
        requests = [ScoreRequest(solver_prompt(question, docs, self.validator), continuations,
                                 question_span(question, docs) if with_question else None,
                                 document_cuts(docs) if self.separate_documents else None) for docs in subsets]
        return self.scorer.score_many(requests)   # scored in sorted order: subsets sharing a prefix share the KV cache
