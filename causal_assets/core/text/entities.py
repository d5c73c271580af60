"""Rule-based entity extraction: the names a question or chunk is about, with no model to download.

Entity-first retrieval needs the entities a question names ("Arthur's Magazine", "First for Women") to find gaps
and aim micro-queries; these rules find them from surface cues alone, deterministically: quoted spans, runs of
capitalised tokens with name-internal connectors, acronyms and hyphenated or CamelCase names, numbers and years,
and code identifiers. Stopwords are stripped from the start of a span only at a sentence start, where
capitalisation says nothing, so in-name words stay ("The Beatles"). Results are in order of first appearance,
de-duplicated case-insensitively. Known limits (lower-case names, sentence-initial common nouns): docs/pipeline.md
("Graph").
"""
from __future__ import annotations

import re

# Words, keeping inner apostrophes, hyphens and dots ("Arthur's", "SEAL-RAG", "os.path"), or one symbol.
_TOKEN = re.compile(r"\w(?:[\w'’.\-]*\w)?|[^\w\s]")
# Double quotes of either style, or single quotes not inside a word (so "Arthur's" and "'70s" are no
# quotes). The quoted text must start and end with a non-space, so a stray empty "" cannot shift the pairing.
_QUOTED = re.compile(
    r'(?<!\w)"(?=[^"\s])([^"\n]{1,200}?)(?<=\S)"(?!\w)'
    r'|“(?=\S)([^”\n]{1,200}?)”'
    r"|(?<!\w)[\'‘](?=[^\s\'])([^\'‘’\n]{2,100}?)(?<=\S)[\'’](?!\w)"
)
# Longer quotes are sentences, not names; the other rules still read inside them.
MAX_QUOTED_WORDS = 12
QUESTION_WORDS = frozenset("what which who whom whose where when why how whether".split())
STOPWORDS = QUESTION_WORDS | frozenset("""
    is are was were be been being am do does did has have had can could will would shall should may might must
    the a an this that these those it its he she they them his her hers their theirs i we you our your my me us
    there here in on at of for from by with as about after before during since until to into through under
    over between among and or but nor if than then so yet also both either neither not no yes
    while although though because however despite unlike like following according other another
    some many most all each every such one name list give tell find identify inc ltd co corp llc plc jr sr
""".split())
# Lower-case words that sit inside names, between capitalised words. "and"/"or" are left out on purpose:
# questions join two names with them ("Are Karl Shapiro and Elie Wiesel both ...").
CONNECTORS = frozenset("of the for de da di del della der den du des la le les van von y & v vs".split())
# Name particles that may open a span ("von Trapp", "de Gaulle").
PARTICLES = frozenset("von van de der den da di del della du la le al bin ibn".split())
# Tokens whose following period belongs to the name: initials and common abbreviations.
ABBREVIATIONS = frozenset("v vs st dr mr mrs ms jr sr mt ft inc ltd co corp".split())
_INITIALS = re.compile(r"[A-Z](?:\.[A-Z])*")
# Descriptors that questions use as constraints, not as entities to retrieve ("Which Canadian rock band").
DEMONYMS = frozenset("""
    american british english scottish welsh irish canadian australian german french italian spanish
    portuguese dutch danish swedish norwegian finnish russian polish greek turkish chinese japanese korean
    indian mexican brazilian argentine argentinian egyptian israeli iranian african european asian
    north south east west northern southern eastern western central
""".split())
_NOT_IDENTIFIERS = frozenset({"e.g", "i.e", "etc", "a.m", "p.m"})


def extract_entities(text: str, max_entities: int | None = None) -> list[str]:
    """Entities in `text` in order of first appearance, de-duplicated case-insensitively."""
    return _extract(text, query=False, max_entities=max_entities)


def extract_query_entities(question: str, max_entities: int | None = None) -> list[str]:
    """Entities a question asks about, tuned for HotpotQA-style questions.

    Like `extract_entities`, but spans made only of nationality or compass words ("Canadian",
    "South Korean") are dropped: they constrain the answer but match too many passages to be worth
    retrieving for.
    """
    return _extract(question, query=True, max_entities=max_entities)


def _extract(text: str, query: bool, max_entities: int | None) -> list[str]:
    found: list[tuple[int, str]] = []  # (start offset, entity)
    claimed: list[tuple[int, int]] = []
    for m in _QUOTED.finditer(text):
        inner = _clean(next(g for g in m.groups() if g is not None))
        if inner and len(inner.split()) <= MAX_QUOTED_WORDS:
            found.append((m.start(), inner))
            claimed.append((m.start(), m.end()))

    tokens = [m for m in _TOKEN.finditer(text)
              if not any(s <= m.start() < e for s, e in claimed)]
    words = [m.group() for m in tokens]
    # A sentence starts at the text start, after . ! ? or at a line break.
    starts = [i == 0 or words[i - 1] in ".!?" or "\n" in text[tokens[i - 1].end():tokens[i].start()]
              for i in range(len(tokens))]

    def is_cap(i: int) -> bool:
        return i < len(words) and words[i][0].isupper()

    def is_link(i: int) -> bool:
        """May sit inside a name, if a capitalised token follows."""
        w = words[i]
        if w == ".":  # the period of an initial or abbreviation, written right after it: "J. M.", "v."
            prev = words[i - 1] if i else ""
            return tokens[i - 1].end() == tokens[i].start() and (
                _INITIALS.fullmatch(prev) is not None or prev.lower() in ABBREVIATIONS)
        return not is_cap(i) and (w.lower() in CONNECTORS or w[0].isdigit())

    i = 0
    while i < len(tokens):
        if is_cap(i) or (words[i].lower() in PARTICLES and is_cap(i + 1)):
            last = i
            while True:  # extend over (links* capitalised)
                k = last + 1
                while k < len(tokens) and is_link(k):
                    k += 1
                if not is_cap(k):
                    break
                last = k
            span = _span(text, tokens, words, i, last, strip=STOPWORDS if starts[i] else QUESTION_WORDS)
            if span and not (query and _is_demonym(span[1])):
                found.append(span)
            i = last + 1
            continue
        if _is_number(words[i]) or _is_identifier(words[i]):
            found.append((tokens[i].start(), words[i]))
        i += 1

    seen: set[str] = set()
    entities: list[str] = []
    for _, entity in sorted(found, key=lambda t: t[0]):  # stable: ties keep extraction order
        if entity.casefold() not in seen:
            seen.add(entity.casefold())
            entities.append(entity)
    return entities if max_entities is None else entities[:max(max_entities, 0)]


def _span(text, tokens, words, first: int, last: int, strip: frozenset[str]) -> tuple[int, str] | None:
    """The span's (start, text) after stripping leading stopwords and links; None if nothing is left."""
    while first <= last and (words[first].lower() in strip or not (
            words[first][0].isupper() or words[first][0].isdigit() or words[first].lower() in PARTICLES)):
        first += 1
    if first > last or all(w.lower() in STOPWORDS or not w[0].isalnum() for w in words[first:last + 1]):
        return None
    return tokens[first].start(), " ".join(text[tokens[first].start():tokens[last].end()].split())


def _clean(quoted: str) -> str:
    # Questions often put their own punctuation inside the quotes: "Lawless?"
    return " ".join(quoted.split()).strip(" .,;:!?")


def _is_demonym(entity: str) -> bool:
    return all(w.lower() in DEMONYMS for w in re.split(r"[\s\-]+", entity))  # also "Mexican-American"


def _is_number(word: str) -> bool:
    return word[0].isdigit()


def _is_identifier(word: str) -> bool:
    """snake_case, dotted.name, camelCase or pH: code names that do not start with a capital."""
    if word.lower() in _NOT_IDENTIFIERS or not any(c.isalpha() for c in word):
        return False
    return "_" in word or "." in word or any(c.isupper() for c in word[1:])
