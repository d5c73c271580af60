"""SEAL-RAG style entity-first ranking: a chunk earns its slot by naming the entities a question still lacks.

Plain relevance ranking keeps adding chunks that say the same thing; entity-first replacement keeps the
context at a fixed size (the budget, "fixed-k") and swaps the chunks that cover the fewest missing entities
for ones that cover more, so distractors are pushed out instead of piling up.

Chunks are plain dicts: "content" (or "text") is matched, plus "title" when present, because a HotpotQA
paragraph often names its subject only in its title. "id" identifies a chunk, and "score" (a prior relevance
score) breaks ties. Coverage is the fraction of the target entities found; matching is case-insensitive
and on word boundaries.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache
from typing import Any, Hashable, Sequence

Chunk = dict[str, Any]


def normalise_entities(entities: Sequence[str]) -> tuple[str, ...]:
    """Collapse whitespace and drop blanks and case-insensitive duplicates (first spelling wins).

    Duplicates would count one entity twice in the coverage denominator.
    """
    seen: set[str] = set()
    out: list[str] = []
    for entity in entities:
        entity = " ".join(str(entity).split())
        if entity and entity.casefold() not in seen:
            seen.add(entity.casefold())
            out.append(entity)
    return tuple(out)


@lru_cache(maxsize=1024)
def _patterns(entities: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    # Lookarounds rather than \b: \b needs a word character at the entity's edge, so it cannot match
    # "C++" or "(SEAL-RAG)". (?<!\w)/(?!\w) still stop "DPR" from matching inside "DPRK".
    # Inner whitespace matches any whitespace run, so "entity extraction" matches across a line break.
    return tuple(
        re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, e.split())) + r"(?!\w)", re.IGNORECASE)
        for e in entities
    )


def chunk_text(chunk: Chunk) -> str:
    """The text that entity matching sees: title then body."""
    body = chunk.get("content") or chunk.get("text") or ""
    title = chunk.get("title") or ""
    return f"{title}\n{body}" if title else body


def _found(chunk: Chunk, entities: tuple[str, ...], patterns: tuple[re.Pattern[str], ...]) -> frozenset[str]:
    text = chunk_text(chunk)
    return frozenset(e for e, p in zip(entities, patterns) if p.search(text))


def _identity(chunk: Chunk) -> Hashable:
    """A chunk's id when it has one, else its text: micro-queries often re-retrieve chunks already held."""
    if chunk.get("id") is not None:
        return ("id", repr(chunk["id"]))
    return ("text", chunk_text(chunk))


def _prior(chunk: Chunk) -> float:
    """The chunk's existing relevance score; chunks without one lose ties to chunks with one."""
    score = chunk.get("score")
    return -math.inf if score is None else float(score)


class EntityFirstRanker:
    """Rank and replace chunks by how many target entities they cover.

    `replacement_threshold` is the least improvement, as a fraction of the missing entities, that a swap
    must bring; it keeps the context from churning over ties.
    """

    def __init__(self, replacement_threshold: float = 0.1):
        if replacement_threshold < 0:
            raise ValueError(f"replacement_threshold must be >= 0, got {replacement_threshold}")
        self.replacement_threshold = replacement_threshold

    def compute_entity_coverage(self, chunk: Chunk, target_entities: Sequence[str]) -> tuple[float, list[str]]:
        """(fraction of target entities in the chunk, the entities found in target order).

        No target entities gives (0.0, []): there is nothing for the chunk to cover.
        """
        entities = normalise_entities(target_entities)
        if not entities:
            return 0.0, []
        found = _found(chunk, entities, _patterns(entities))
        return len(found) / len(entities), [e for e in entities if e in found]

    def find_replacement_candidates(
        self, current_chunks: list[Chunk], new_chunks: list[Chunk], missing_entities: Sequence[str]
    ) -> list[tuple[int, Chunk, float]]:
        """(current_idx, new_chunk, improvement) for each swap that improves coverage by more than the threshold.

        Best newcomers are paired with the weakest incumbents, each used at most once; improvement is the
        newcomer's coverage of the missing entities minus the incumbent's. New chunks already present in
        `current_chunks` (same id, or same text) are not candidates.
        """
        entities = normalise_entities(missing_entities)
        if not entities:
            return []
        patterns = _patterns(entities)

        def coverage(chunk: Chunk) -> float:
            return len(_found(chunk, entities, patterns)) / len(entities)

        fresh = _unique(new_chunks, exclude={_identity(c) for c in current_chunks})
        newcomers = sorted(((coverage(c), _prior(c), -i, c) for i, c in enumerate(fresh)),
                           key=lambda t: t[:3], reverse=True)
        # Weakest first; among equals the later (lower-ranked) incumbent goes first.
        incumbents = sorted((coverage(c), -i) for i, c in enumerate(current_chunks))

        candidates = []
        for (new_cov, _, _, chunk), (cur_cov, neg_idx) in zip(newcomers, incumbents):
            improvement = new_cov - cur_cov
            if improvement <= self.replacement_threshold:
                break  # newcomers only get worse and incumbents only better from here on
            candidates.append((-neg_idx, chunk, improvement))
        return candidates

    def replace_chunks(
        self, current_chunks: list[Chunk], new_chunks: list[Chunk], missing_entities: Sequence[str], budget: int
    ) -> tuple[list[Chunk], list[str]]:
        """Fold `new_chunks` into `current_chunks` without ever holding more than `budget` chunks.

        Greedy and progressive: each step takes the new chunk covering the most still-missing entities,
        puts it in an empty slot while the result is below budget, else in place of the chunk whose loss
        reopens the fewest gaps (lowest coverage, then lowest rank). A step happens only when its net gain,
        as a fraction of the missing entities, exceeds the threshold, so a chunk that alone covers an
        entity is never swapped out for one that covers nothing new. Returns (chunks, still-missing entities).
        """
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        entities = normalise_entities(missing_entities)
        patterns = _patterns(entities)
        held = [(c, _found(c, entities, patterns)) for c in current_chunks]
        while len(held) > budget:  # an over-full start is trimmed the same way a swap picks its victim
            del held[_weakest(held)]

        pool = [(c, _found(c, entities, patterns))
                for c in _unique(new_chunks, exclude={_identity(c) for c, _ in held})]
        while pool and budget > 0 and entities:
            still = set(entities).difference(*(found for _, found in held))
            best = max(range(len(pool)), key=lambda i: (len(pool[i][1] & still), _prior(pool[i][0]), -i))
            gain = len(pool[best][1] & still)
            if len(held) < budget:
                slot, loss = None, 0
            else:
                slot = _weakest(held)
                loss = _unique_cover(held)[slot]
            # The best newcomer against the one fixed victim: if it does not pay, no newcomer does.
            if gain == 0 or (gain - loss) / len(entities) <= self.replacement_threshold:
                break
            if slot is None:
                held.append(pool.pop(best))
            else:
                held[slot] = pool.pop(best)

        covered = set().union(*(found for _, found in held))
        return [c for c, _ in held], [e for e in entities if e not in covered]

    def rank_by_entity_coverage(self, chunks: list[Chunk], entities: Sequence[str], top_k: int) -> list[Chunk]:
        """The `top_k` chunks by entity coverage; ties by "score" (highest first), then input order.

        Zero-coverage chunks still fill the tail, so callers get k chunks whenever k exist.
        """
        targets = normalise_entities(entities)
        patterns = _patterns(targets)
        order = sorted(range(len(chunks)),
                       key=lambda i: (-len(_found(chunks[i], targets, patterns)), -_prior(chunks[i]), i))
        return [chunks[i] for i in order[:max(top_k, 0)]]


def _unique(chunks: list[Chunk], exclude: set[Hashable]) -> list[Chunk]:
    """Chunks in order, without repeats and without those whose identity is in `exclude`."""
    seen = set(exclude)
    out = []
    for chunk in chunks:
        key = _identity(chunk)
        if key not in seen:
            seen.add(key)
            out.append(chunk)
    return out


def _unique_cover(held: list[tuple[Chunk, frozenset[str]]]) -> list[int]:
    """For each held chunk, how many entities no other held chunk covers (the gaps its removal reopens)."""
    counts = Counter(e for _, found in held for e in found)
    return [sum(1 for e in found if counts[e] == 1) for _, found in held]


def _weakest(held: list[tuple[Chunk, frozenset[str]]]) -> int:
    """Index of the chunk to give up: fewest unique entities, then fewest entities, then the lowest-ranked."""
    unique = _unique_cover(held)
    return min(range(len(held)), key=lambda i: (unique[i], len(held[i][1]), -i))
