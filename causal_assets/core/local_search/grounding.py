"""Is an answer grounded in the evidence the model was given?

Two checks, both plain and explainable:
  * no evidence at all (no entity and no text unit reached the network data): the model is not asked; the answer
    is `no_evidence_answer(corpus)`;
  * the answer's distinctive terms (identifiers such as `get_shortest_path`, capitalised names, numbers) that
    appear neither in the evidence nor in the question (as whole words): listed, and the answer is flagged as not
    supported when any of those is a name or an identifier, or more than half of its numbers are missing.
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
           "Why", "How", "As", "To", "For", "Of", "By", "With", "From", "Its", "Their", "So", "Not", "None", "Also",
           "Both", "He", "She", "His", "Her", "You", "Our", "All", "Some", "One", "Two", "Yes", "Sure", "Note",
           "Summary", "Conclusion", "Overall", "In", "At", "Final", "Response", "Analysis", "Pathways", "Roles",
           "Recommendations", "Strength", "Introduction", "Data", "Graph", "Community", "Communities"}


def no_evidence_answer(corpus: str) -> str:
    return (f"No evidence in corpus {corpus!r}: nothing in its graph or text matched the question, so no answer "
            "was generated.")


def distinctive_terms(text: str) -> list[str]:
    out = []
    for m in _DISTINCTIVE.finditer(text or ""):
        term = re.sub(r"['’]s$", "", m.group(0)).strip(".,'-")  # Dijkstra's -> Dijkstra
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


def _found(term: str, text: str) -> bool:
    """`term` as a whole word (or identifier) in `text`, case-insensitively: `13` is not found in `2013`."""
    return re.search(r"(?<![\w.])" + re.escape(term.lower()) + r"(?![\w])", text) is not None


def check_grounding(answer: str, question: str, evidence: list[str]) -> Grounding:
    """Grounded when every name or identifier the answer adds to the question is in the evidence, and most of its
    numbers are: a model that names something the evidence never mentions is answering from elsewhere."""
    if not evidence:
        return Grounding(False, 0)
    haystack = "\n".join(evidence).lower()
    asked = (question or "").lower()
    terms = [t for t in distinctive_terms(answer) if not _found(t, asked)]
    unsupported = [t for t in terms if not _found(t, haystack)]
    names = [t for t in unsupported if not t[0].isdigit()]
    numbers = [t for t in terms if t[0].isdigit()]
    missing_numbers = [t for t in unsupported if t[0].isdigit()]
    grounded = not names and len(missing_numbers) * 2 <= len(numbers)
    return Grounding(grounded, len(evidence), terms, unsupported)
