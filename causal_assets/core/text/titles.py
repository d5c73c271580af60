"""Entity keys and title matching: how a name is normalised to find the same entity again (graph entity nodes,
a query's entities entering the graph), the entity a paragraph's title names, and which titles a sentence mentions."""
from __future__ import annotations

import re
import unicodedata
from collections import defaultdict

from causal_assets.core.text.entities import STOPWORDS

_WORD = re.compile(r"\w+")
_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")
_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)


def entity_key(name: str) -> str:
    """Normalised entity key: NFKC, case-folded word tokens, no trailing possessive."""
    s = unicodedata.normalize("NFKC", name).strip()
    s = _POSSESSIVE.sub("", s)
    return " ".join(_WORD.findall(s.casefold()))


def title_entity(title: str) -> str:
    """The entity a title names: "Rush (band)" -> "Rush"."""
    return _DISAMBIGUATION.sub("", title or "").strip()


class TitleMatcher:
    """Finds which titles a sentence mentions, via an index of titles by their first (case-folded) token."""

    def __init__(self, titles: list[tuple[str, str]]):  # (chunk_id, title)
        self.by_first: dict[str, list[tuple[tuple[str, ...], bool, str]]] = defaultdict(list)
        for cid, title in titles:
            name = title_entity(title)
            toks = tuple(t.casefold() for t in _WORD.findall(name))
            if not toks or (len(toks) == 1 and (len(toks[0]) < 3 or toks[0] in STOPWORDS)):
                continue  # "A", "It": would match everywhere
            self.by_first[toks[0]].append((toks, name[:1].isupper(), cid))

    def find(self, sentence: str) -> set[str]:
        """Chunk ids whose title appears in `sentence` as a whole-token sequence."""
        matches = list(_WORD.finditer(sentence))
        toks = [m.group().casefold() for m in matches]
        found: set[str] = set()
        for i, tok in enumerate(toks):
            for ttoks, capital, cid in self.by_first.get(tok, ()):
                if tuple(toks[i:i + len(ttoks)]) == ttoks and (not capital or matches[i].group()[:1].isupper()):
                    found.add(cid)
        return found
