"""Is an answer grounded in the evidence the model was given?

Two checks, both plain and explainable:
  * no evidence at all (no entity and no text unit reached the network data): the model is not asked; the answer
    is `no_evidence_answer(corpus)`;
  * the answer's distinctive terms (identifiers such as `get_shortest_path`, capitalised names, numbers) and
    content words (lower-case words of 4+ letters, not stop words) that appear neither in the evidence nor in the
    question (as whole words): listed, and the answer is flagged as not supported when any name or identifier is
    missing, or more than half of its numbers, or more than half of its content words. An answer that adds nothing
    checkable to the question is "not checked", never "supported".
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


_STOP = set("""able about above after again against also although among answer answers another based because been
before being below between both cannot could does doing done down during each either else even every following
from further given have having here however information into itself just know known like made make many more most
much must neither never none only other others over provided question same several shall should since some such
than that their theirs them then there therefore these they this those though through thus together under until
upon used uses using very well were what whatever when where whether which while whom whose will with within
without would your yours context text""".split())
_WORD = re.compile(r"(?<![\w.'’-])[a-z]{4,}(?![\w-])")


def content_words(text: str) -> list[str]:
    """Lower-case words of 4+ letters that carry content (not stop words), in order, each once."""
    return list(dict.fromkeys(w for w in _WORD.findall(text or "") if w not in _STOP))


@dataclass
class Grounding:
    grounded: bool
    evidence_items: int
    terms: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    checked: bool = True   # False: the answer adds no name, number or content word to the question

    def note(self) -> str:
        """One line for the user, empty when the answer is grounded."""
        if self.evidence_items == 0:
            return "no evidence retrieved"
        if not self.checked:
            return "not checked: the answer adds no name, number or content word to the question"
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
    distinct = [t for t in distinctive_terms(answer) if not _found(t, asked)]
    seen = {t.lower() for t in distinct}
    words = [w for w in content_words(answer) if w not in seen and not _found(w, asked)]
    terms = distinct + words
    if not terms:
        return Grounding(False, len(evidence), checked=False)
    unsupported = [t for t in terms if not _found(t, haystack)]
    names = [t for t in unsupported if t in distinct and not t[0].isdigit()]
    numbers = [t for t in distinct if t[0].isdigit()]
    missing_numbers = [t for t in unsupported if t[0].isdigit()]
    missing_words = [t for t in unsupported if t in words]
    grounded = not names and len(missing_numbers) * 2 <= len(numbers) and len(missing_words) * 2 <= len(words)
    return Grounding(grounded, len(evidence), terms, unsupported)
