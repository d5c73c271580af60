"""Is an answer grounded in the evidence the model was given?

Two checks, both plain and explainable:
  * no evidence at all (no entity and no text unit reached the network data): the model is not asked; the answer
    is `no_evidence_answer(corpus)`;
  * the answer's distinctive terms (identifiers such as `get_shortest_path`, capitalised names, numbers) that
    appear neither in the evidence nor in the question: listed, and the answer is flagged as not supported when
    none of its distinctive terms is in the evidence or at least half of them are missing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# identifiers with _ or . inside, CamelCase / Capitalised words, numbers
_DISTINCTIVE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[._][A-Za-z0-9_]+)+|[A-Z][A-Za-z0-9'-]+|\d[\d,.]*")
_COMMON = {"The", "This", "That", "These", "Those", "It", "In", "On", "A", "An", "And", "Or", "But", "If", "Yes",
           "No", "Based", "According", "However", "Therefore", "Answer", "Question", "Report", "Entities",
           "Entity", "Relationships", "Text", "Network", "Introduction", "Key", "Major", "Confidence", "Evidence",
           "Implications", "Causal", "I", "We", "They", "There", "Here", "What", "Which", "Who", "When", "Where",
           "Why", "How", "As", "To", "For", "Of", "By", "With", "From", "Its", "Their", "So", "Not", "None"}


def no_evidence_answer(corpus: str) -> str:
    return (f"No evidence in corpus {corpus!r}: nothing in its graph or text matched the question, so no answer "
            "was generated.")


def distinctive_terms(text: str) -> list[str]:
    out = []
    for m in _DISTINCTIVE.finditer(text or ""):
        term = m.group(0).strip(".,'-")
        if term and term not in _COMMON and term not in out and len(term) > 1:
            out.append(term)
    return out


@dataclass
class Grounding:
    grounded: bool
    evidence_items: int
    terms: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)

    def note(self) -> str:
        """One line for the user, empty when the answer is grounded."""
        if self.evidence_items == 0:
            return "no evidence retrieved"
        if self.grounded:
            return ""
        missing = ", ".join(self.unsupported[:8])
        return f"not supported by the retrieved evidence (not found in it: {missing})"


def check_grounding(answer: str, question: str, evidence: list[str]) -> Grounding:
    if not evidence:
        return Grounding(False, 0)
    haystack = "\n".join(evidence).lower()
    asked = (question or "").lower()
    terms = [t for t in distinctive_terms(answer) if t.lower() not in asked]
    unsupported = [t for t in terms if t.lower() not in haystack]
    supported = len(terms) - len(unsupported)
    grounded = not terms or (supported > 0 and len(unsupported) * 2 < len(terms))
    return Grounding(grounded, len(evidence), terms, unsupported)
