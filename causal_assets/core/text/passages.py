"""What of a document the solver reads when the document is longer than its share of the solver's context.

A pool's documents are shown whole whenever they fit (`labeling.pools.PoolParams.doc_chars` derives each
document's share from the solver's context window and the pool size). A longer one is not cut from its start, where
the answer may not be: `fit_passage` keeps the run of whole lines, at most `max_chars` long, that holds the most
of the question's index terms (ties: the earliest), and says which characters it kept.
"""
from __future__ import annotations

from dataclasses import dataclass

from causal_assets.core.text.analyzer import analyze


@dataclass(frozen=True)
class Passage:
    text: str
    start: int     # the kept characters of the document: text == document[start:end]
    end: int
    length: int    # the document's length

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end == self.length


def _lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of every line of `text`, its newline included."""
    out, start = [], 0
    for line in text.splitlines(keepends=True):
        out.append((start, start + len(line)))
        start += len(line)
    return out or [(0, 0)]


def fit_passage(text: str, query: str, max_chars: int, split_identifiers: bool = False) -> Passage:
    """`text` whole if it fits in `max_chars`, else its best-matching window of whole lines (module docstring); a
    single line longer than `max_chars` is cut at `max_chars`."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    if len(text) <= max_chars:
        return Passage(text, 0, len(text), len(text))
    terms = set(analyze(query, split_identifiers))
    spans = _lines(text)
    weights = [len(terms & set(analyze(text[a:b], split_identifiers))) for a, b in spans]
    best, best_score, j, score = (0, spans[0][1]), -1, 0, 0
    for i, (a, _b) in enumerate(spans):   # windows of whole lines starting at line i, as long as they fit
        if j < i:
            j, score = i, 0
        while j < len(spans) and spans[j][1] - a <= max_chars:
            score += weights[j]
            j += 1
        end = spans[j - 1][1] if j > i else min(a + max_chars, len(text))
        if score > best_score:
            best, best_score = (a, end), score
        if j > i:
            score -= weights[i]
    start, end = best
    if end - start > max_chars or end <= start:   # one line longer than the budget: cut inside it
        start, end = start, start + max_chars
    return Passage(text[start:end], start, end, len(text))
