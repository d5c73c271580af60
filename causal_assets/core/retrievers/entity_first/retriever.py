"""SEAL-RAG style entity-first retrieval with a fixed budget: retrieve, find entity gaps, micro-query, replace.

Over a question's candidate set (`within`, e.g. a HotpotQA question's 10 paragraphs): the question's entities
(`extract_query_entities`, plus an optional `entity_extractor` hook); the top `k` of a z-score hybrid with a
title-match bonus; then entity repair (an entity no held paragraph is about is micro-queried by title and swapped
in, `EntityFirstRanker.replace_chunks`, never exceeding the budget) and bridge repair (the paragraph a held
first-hop paragraph names by title). The held `k` come first, the rest in prior order; everything is
deterministic. Every heuristic's parameter is a field searched on the tune split (`core/tuning/search.py`, space
`entity_first`). See docs/pipeline.md ("Retrievers").
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Mapping, Sequence

import numpy as np

from causal_assets.core.index.search import CorpusIndex, Hit
from causal_assets.core.retrievers.entity_first.ranker import EntityFirstRanker, normalise_entities
from causal_assets.core.retrievers.similarity import _check_within_stats, sparse_scores, zscore
from causal_assets.core.text.entities import STOPWORDS, extract_query_entities

# Yes/no questions ("Are X and Y both ...?") open with an auxiliary verb; HotpotQA asks them of comparisons.
_AUX = frozenset("are is was were do does did have has can could".split())
_WORD = re.compile(r"\w+")
STRONG_TITLE = 0.5  # default title-match score from which a paragraph counts as named by the question
# The constants of `title_match_scores` (defaults): a title form other than the first (", Place"-less) found in the
# question; a question entity covering the title's words; the title's content words in the question; the factor of a
# lower-case match of a capitalised title, and of a match inside a longer title's match.
TITLE_MATCH = {"alias": 0.9, "entity": 0.8, "words": 0.5, "lowercase": 0.5, "nested": 0.5}
_DISAMBIGUATOR = re.compile(r"\s*\([^()]*\)\s*$")  # "Big Stone Gap (film)" -> "Big Stone Gap"
_QUOTES = re.compile(r"[\"“”]")


def title_forms(title: str) -> list[str]:
    """The names a paragraph title goes by: without its disambiguator, and without a ", Place" qualifier.

    Wikipedia titles disambiguate with "(film)" or ", Queensland"; questions and other paragraphs mention the
    bare name ("Alice River, Queensland" is mentioned as "Alice River").
    """
    base = _DISAMBIGUATOR.sub("", html.unescape(title)).strip()
    forms = [base] if base else []
    if "," in base:
        head = base.split(",")[0].strip()
        if len(head) > 3:
            forms.append(head)
    return forms


@lru_cache(maxsize=8192)  # the same titles are matched against many texts; compiling dominated the linking time
def _phrase(text: str, case_sensitive: bool = False) -> re.Pattern[str]:
    return re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, text.split())) + r"(?!\w)",
                      0 if case_sensitive else re.IGNORECASE)


def _content_tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def is_comparison(question: str, entities: Sequence[str]) -> bool:
    """Comparison-shaped: "X or Y?", yes/no ("Are X and Y ...?") or "both" with two named entities.

    Comparison questions name every entity they need, so they get no bridge hop.
    """
    q = question.strip()
    first = q.split()[0].lower() if q else ""
    return len(entities) >= 2 and (" or " in q or first in _AUX or " both " in f" {q.lower()} ")


def comparison_targets(question: str, entities: Sequence[str]) -> list[str]:
    """In "..., X or Y?" the compared entities are the last one before " or " and the first one after it;
    the others ("Who directed "7th Heaven" (1927), Jerry Belson or Frank Borzage?") are context."""
    at = question.find(" or ")
    if at < 0:
        return list(entities)
    before = [e for e in entities if 0 <= question.find(e) < at]
    after = [e for e in entities if question.find(e) > at]
    return ([before[-1]] if before else []) + ([after[0]] if after else []) or list(entities)


def compute_title_links(titles: Sequence[str], texts: Sequence[str]) -> list[list[int]]:
    """links[i] = indices j != i whose title paragraph i's text mentions (a hyperlink stand-in).

    - The disambiguator-free form links ("Waterford, New York"), and so does its ", Place"-less head where the text
      also names every qualifier ("located at Waterford in Saratoga County, New York"): the head alone
      ("College of Engineering" from "College of Engineering, Kallooppara") is too generic to stand for the page.
    - Double quotes are not part of a name: Wikipedia text quotes italic titles ('Space Shuttle "Columbia"').
    - Case-sensitive on word boundaries: titles are names, and "Musket" must not link from "flintlock musket".
    - A title strictly inside the paragraph's own name is its name, not a link ("Thurgood Marshall College"
      in the text of "Thurgood Marshall College Fund"). The same holds for a qualified title's head, which then
      links only in full: "Humphrey Stafford, Earl of Stafford" names its father "Humphrey Stafford, 1st Duke of
      Buckingham" in full, and "Humphrey Stafford" alone is the paragraph's own name.
    """
    texts = [_QUOTES.sub("", t) for t in texts]
    base = [" ".join(_QUOTES.sub("", title_forms(t)[0]).split()) if title_forms(t) else "" for t in titles]
    patterns = [_phrase(b, case_sensitive=True) if b else None for b in base]
    # ("Waterford", ["New York"]) of "Waterford, New York": the head and the qualifiers a text must also name
    qualified = [(parts[0], parts[1:]) if len(parts) > 1 and len(parts[0]) > 3 else None
                 for parts in ([p.strip() for p in b.split(",") if p.strip()] for b in base)]
    # A match contains the title's first word verbatim: a substring test on it rules out most pairs before any
    # regex runs (the pairs are quadratic in the candidates).
    heads = [(_WORD.findall(b) or [b])[0] if b else "" for b in base]

    def inside_own_name(name: str, i: int) -> bool:
        """`name` lies strictly inside paragraph i's own name: it is i's name there, not a link."""
        return name.casefold() != base[i].casefold() and bool(_phrase(name).search(base[i]))

    def names(i: int, j: int) -> bool:
        if patterns[j] is None or heads[j] not in texts[i]:
            return False
        if patterns[j].search(texts[i]):
            return True
        if qualified[j] is None or inside_own_name(qualified[j][0], i):
            return False
        head, quals = qualified[j]
        return bool(_phrase(head, case_sensitive=True).search(texts[i])) and \
            all(_phrase(q, case_sensitive=True).search(texts[i]) for q in quals)

    return [[j for j in range(len(titles)) if j != i and patterns[j] is not None
             and not inside_own_name(base[j], i) and names(i, j)] for i in range(len(titles))]


def title_match_scores(question: str, titles: Sequence[str], entities: Sequence[str],
                       weights: Mapping[str, float] | None = None) -> np.ndarray:
    """How strongly the question names each paragraph's title, in [0, 1].

    - 1.0: a title form occurs in the question (0.9 for the ", Place"-less form); halved when the question's
      text is all lower case while the title is capitalised (a common noun, not a name), or when another
      title's match in the question strictly contains this one ("Hackers" inside "In the Realm of the Hackers");
    - else 0.8 * the share of the title's words that a question entity covers ("Tottenham Hotspur" in
      "Tottenham Hotspur F.C."), so a title that is mostly the entity beats "History of Tottenham Hotspur F.C.";
    - else 0.5 * the share of the title's content words found in the question.

    `weights` overrides those constants (`TITLE_MATCH` keys).
    """
    w = {**TITLE_MATCH, **(weights or {})}
    q_tokens = set(_WORD.findall(question.lower()))
    ent_patterns = [(e, _phrase(e)) for e in entities]
    spans: list[tuple[int, int] | None] = []
    scores = np.zeros(len(titles))
    for i, title in enumerate(titles):
        best, span = 0.0, None
        for rank, form in enumerate(title_forms(title)):
            m = _phrase(form).search(question)
            if m:
                s = 1.0 if rank == 0 else w["alias"]
                if m.group().islower() and not form.islower():
                    s *= w["lowercase"]
                if s > best:
                    best, span = s, m.span()
            n = max(len(_WORD.findall(form)), 1)
            for e, p in ent_patterns:
                if p.search(form):
                    best = max(best, w["entity"] * min(len(_WORD.findall(e)) / n, 1.0))
            toks = _content_tokens(form)
            if toks:
                best = max(best, w["words"] * sum(t in q_tokens for t in toks) / len(toks))
        scores[i] = best
        spans.append(span)
    for i, si in enumerate(spans):  # longest match wins
        if si and any(sj and sj != si and sj[0] <= si[0] and si[1] <= sj[1] for sj in spans):
            scores[i] *= w["nested"]
    return scores


@dataclass
class EntityFirstRetriever:
    """Entity-first retriever with a fixed budget `k` and at most `max_repairs` replacement rounds.

    `title_links` maps a chunk id to the chunk ids whose titles it mentions; when None they are computed from
    each question's candidate set. `entity_extractor(question) -> list[str]` adds entities to the rule-based
    ones. The defaults are the first version's (HotpotQA `train` half); tuned values come from a benchmark's tune
    split through `tuned_retriever_configs` (module docstring).
    """
    index: CorpusIndex
    k: int = 2
    max_repairs: int = 3
    replacement_threshold: float = 0.0
    title_links: Mapping[str, Sequence[str]] | None = None
    entity_extractor: Callable[[str], list[str]] | None = None
    dense_weight: float = 0.5     # share of the dense z-score in the initial hybrid score
    title_weight: float = 2.0     # title-match bonus in the prior (a named title is worth ~2 std of relevance)
    bridge_weight: float = 0.3    # weight of the linked paragraph's own relevance when choosing a bridge pair
    bridge: bool = True           # bridge repair (step 4) on non-comparison questions
    strong_title: float = STRONG_TITLE   # title match from which a paragraph counts as named for an entity
    title_match: Mapping[str, float] | None = None   # overrides of TITLE_MATCH
    within_stats: str = "corpus"  # BM25 statistics of the initial hybrid: the corpus or the candidates
    # Without a candidate set (a search of the whole corpus), the candidates are the corpus's best `shortlist` by the
    # initial hybrid: the repairs compare candidates pairwise (title links), which over 2,394 chunks took two minutes.
    shortlist: int = 100
    last_traces: list[dict] = field(default_factory=list, repr=False)

    name = "entity_first"

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.max_repairs < 0:
            raise ValueError(f"max_repairs must be >= 0, got {self.max_repairs}")
        if self.shortlist < 1:
            raise ValueError(f"shortlist must be >= 1, got {self.shortlist}")
        unknown = set(self.title_match or {}) - set(TITLE_MATCH)
        if unknown:
            raise ValueError(f"title_match: unknown keys {sorted(unknown)}; known: {sorted(TITLE_MATCH)}")
        _check_within_stats(self.within_stats)
        self.ranker = EntityFirstRanker(self.replacement_threshold)

    # -- Retriever protocol ------------------------------------------------------------------------------
    def retrieve_many(self, queries: list[str], k: int, within: list[list[str]] | None = None) -> list[list[Hit]]:
        """A ranking of each query's candidates, cut at `k` (the budget `self.k` fixes only the chosen head)."""
        vectors = self.index.embedder.encode_queries(queries)
        self.last_traces = []
        out = []
        for i, (q, qv) in enumerate(zip(queries, vectors)):
            cand = list(within[i]) if within else self._shortlist(q, qv)
            ranked, trace = self._rank(q, qv, cand)
            self.last_traces.append(trace)
            n = len(ranked)
            out.append([Hit(cid, float(n - r), r + 1, self._title(cid), self._kind(cid))
                        for r, cid in enumerate(ranked[:max(k, 0)])])
        return out

    # -- the loop ------------------------------------------------------------------------------------------
    def _rank(self, question: str, qv: np.ndarray, cand: list[str]) -> tuple[list[str], dict]:
        cand = [c for c in dict.fromkeys(cand) if c in self.index.position]
        if not cand:
            return [], {"entities": [], "comparison": False, "repairs": 0, "steps": [], "initial": [], "held": []}
        pos = np.array([self.index.position[c] for c in cand])
        titles = [self._title(c) for c in cand]
        texts = [str(self.index.chunks.at[p, "text"]) for p in pos]

        # 1. Query entities: rule-based, plus the pluggable extractor.
        entities = list(extract_query_entities(question))
        if self.entity_extractor is not None:
            entities += [str(e) for e in self.entity_extractor(question)]
        entities = list(normalise_entities(entities))
        comparison = is_comparison(question, entities)

        # 2. Initial retrieval: hybrid relevance + title-match bonus.
        rel = self._relevance(question, qv, pos)
        title_match = title_match_scores(question, titles, entities, self.title_match)
        prior = rel + self.title_weight * title_match
        order = sorted(range(len(cand)), key=lambda i: (-prior[i], i))
        # Coverage is judged on what a paragraph is *about*, its title: distractors were picked for mentioning
        # the question's words, so a body mention says little. Forms without disambiguators are matched too.
        chunks = [{"id": cand[i], "title": " | ".join([titles[i], *title_forms(titles[i])]), "content": "",
                   "score": float(prior[i])} for i in range(len(cand))]
        budget = min(self.k, len(cand))
        held = [chunks[i] for i in order[:budget]]
        trace = {"entities": entities, "comparison": comparison, "repairs": 0, "steps": [],
                 "initial": [c["id"] for c in held]}

        # 3. Entity repair: fill gaps for entities some candidate title names (others are constraints such as
        # "1932" that no paragraph is about, and micro-queries for them would only churn).
        targets = comparison_targets(question, entities) if comparison else entities
        # Only entities some paragraph is strongly named for (title match >= STRONG_TITLE) are filled: a weak
        # cover ("Queensland" in "University of Queensland bus station") is a distractor more often than not.
        fillable = [e for e in targets if any(title_match[i] >= self.strong_title
                                              and self.ranker.compute_entity_coverage(c, [e])[0]
                                              for i, c in enumerate(chunks))]
        while trace["repairs"] < self.max_repairs:
            missing = [e for e in fillable
                       if not any(self.ranker.compute_entity_coverage(c, [e])[0] for c in held)]
            if not missing:
                break
            micro = self._micro_query(missing, chunks, title_match)
            # All fillable targets go to the ranker, so a held chunk that alone covers a target counts as a
            # loss and is not swapped out for one that only trades one entity for another.
            new, still = self.ranker.replace_chunks(held, micro, fillable, budget)
            if [c["id"] for c in new] == [c["id"] for c in held]:
                break
            held = new
            trace["repairs"] += 1
            trace["steps"].append({"kind": "entity", "missing": missing, "held": [c["id"] for c in held]})

        # 4. Bridge repair: spend the non-anchor slot on the paragraph the anchor's text links to.
        if self.bridge and not comparison and budget >= 2 and trace["repairs"] < self.max_repairs:
            links = self._links(cand, titles, texts)
            index_of = {c: i for i, c in enumerate(cand)}
            best = None
            for a_rank, anchor in enumerate(held):
                a = index_of[anchor["id"]]
                for b in links[a]:
                    score = prior[a] + self.bridge_weight * rel[b]
                    if best is None or score > best[0]:
                        best = (score, a_rank, b)
            if best is not None:
                _, a_rank, b = best
                bridge = chunks[b]
                if bridge["id"] not in {c["id"] for c in held}:
                    # The anchor goes first so that, covering no missing entity either, it is not the victim.
                    ordered = [held[a_rank]] + [c for r, c in enumerate(held) if r != a_rank]
                    # The full title is the bridge entity: "Alien" would also be covered by "Alien (soundtrack)".
                    entity = html.unescape(titles[b])
                    new, _ = self.ranker.replace_chunks(ordered, [bridge], [entity], budget)
                    if {c["id"] for c in new} != {c["id"] for c in held}:
                        held = new
                        trace["repairs"] += 1
                        trace["steps"].append({"kind": "bridge", "anchor": held[0]["id"], "bridge": bridge["id"],
                                               "held": [c["id"] for c in held]})

        head = [c["id"] for c in held]
        trace["held"] = head
        chosen = set(head)
        return head + [cand[i] for i in order if cand[i] not in chosen], trace

    def _micro_query(self, missing: list[str], chunks: list[dict], title_match: np.ndarray) -> list[dict]:
        """For each missing entity, the candidates whose title names it: an exact title (after dropping the
        disambiguator) first, then by title-match strength and prior. Returned with their match as "score",
        the ranker's tie-breaker among equal coverage."""
        out, seen = [], set()
        for e in missing:
            found = [(i, c) for i, c in enumerate(chunks) if self.ranker.compute_entity_coverage(c, [e])[0]]
            exact = {i for i, c in found
                     if any(f.casefold() == e.casefold() for f in title_forms(c["title"].split(" | ")[0]))}
            found.sort(key=lambda t: (t[0] not in exact, -title_match[t[0]], -t[1]["score"], t[0]))
            for i, c in found:
                if c["id"] not in seen:
                    seen.add(c["id"])
                    out.append({**c, "score": float(2.0 * (i in exact) + title_match[i] + 1e-3 * c["score"])})
        return out

    def _shortlist(self, question: str, qv: np.ndarray) -> list[str]:
        """The whole corpus's `shortlist` best chunks by the initial hybrid relevance, best first."""
        ids = [str(c) for c in self.index.ids]
        if len(ids) <= self.shortlist:
            return ids
        rel = self._relevance(question, qv, np.array([self.index.position[c] for c in ids]))
        return [ids[i] for i in np.argsort(-rel, kind="stable")[: self.shortlist]]

    def _relevance(self, question: str, qv: np.ndarray, pos: np.ndarray) -> np.ndarray:
        sparse = sparse_scores(self.index, question, "bm25", pos, self.within_stats)
        dense = self.index.scores(question, "dense", qv)[pos] if self.index.embeddings is not None else 0 * sparse
        return self.dense_weight * zscore(dense) + (1 - self.dense_weight) * zscore(sparse)

    def _links(self, cand: list[str], titles: list[str], texts: list[str]) -> list[list[int]]:
        if self.title_links is None:
            return compute_title_links(titles, texts)
        index_of = {c: i for i, c in enumerate(cand)}
        return [[index_of[t] for t in self.title_links.get(c, ()) if t in index_of and t != c] for c in cand]

    def _title(self, cid: str) -> str:
        return str(self.index.chunks.at[self.index.position[cid], "title"])

    def _kind(self, cid: str) -> str:
        return str(self.index.chunks.at[self.index.position[cid], "kind"])
