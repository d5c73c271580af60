"""An LLM-backed query entity extractor for the entity-first retriever (`EntityFirstRetriever(entity_extractor=...)`).

The rule-based extractor stays the default (no LLM at query time); this one asks the configured model, through
the same cached client as every other LLM call, and keeps only entities that literally occur in the question,
so a small model's hallucinations cannot add entities.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # only the annotation: the client module loads the OpenAI SDK (seconds), which a search never needs
    from causal_assets.core.llm.client import LLMClient

PROMPT = ("List the named entities (people, places, organisations, works, products) in the question below, "
          "one per line, nothing else.\n\nQuestion: {question}")


@dataclass
class LLMEntityExtractor:
    client: LLMClient
    max_tokens: int = 64

    def __call__(self, question: str) -> list[str]:
        reply = self.client.chat([{"role": "user", "content": PROMPT.format(question=question)}],
                                 max_tokens=self.max_tokens, temperature=0.0).text
        out: list[str] = []
        for line in reply.splitlines():
            name = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip().strip('"\'.,;:')
            if name and name.lower() in question.lower() and name.lower() not in (o.lower() for o in out):
                out.append(name)
        return out
