"""Candidate pools: per question, the seed documents ∪ the retrievers' top candidates ∪ hard negatives ∪ random
documents.

The seed documents come from benchmark metadata (qrels / supporting paragraphs / the mined target) plus, when a graph is
given, the seeds' graph neighbours (what the target imports or calls). A gold *file* (a questions file's gold over a
folder or package corpus) is not a document: its chunks are ranked within the file by BM25 on the question and its
accepted answers, and its best ones seed the pool, at most `per_file` of one file and `gold_share` of the pool in
all, so that the retrievers' top candidates and the negatives from other files keep their room. Hard negatives are
the top BM25 and dense hits that are not seeds (nor of a gold file). Random documents fill the rest. Downstream
every candidate is treated identically; the origin is kept only as metadata, and the pool order is shuffled so
position leaks nothing (each trial then shows its subset in its own order: `runner.presented`).

Each document's text is what the solver reads: whole when it fits its share of the solver's context
(`PoolParams.doc_chars`), else the lines of it that best match the question (`text.passages.fit_passage`); the pool
records the document's length and the characters kept.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.registry.sections import document_chars
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.llm.models import SOLVER_CONTEXT_TOKENS
from causal_assets.core.text.passages import fit_passage

POOL_COLUMNS = ["benchmark", "query_id", "question", "answer", "aliases", "chunk_id", "origin", "position",
                "title", "text", "path", "doc_chars", "kept_start", "kept_end"]
# Corpora whose chunks name a file relative to the corpus's root: the pools (and the label exports) carry it beside the
# document id. Other loaders' `path` is the dataset file itself, the same for every document.
FILE_SOURCES = ("folder", "python_package")


@dataclass(frozen=True)
class PoolParams:
    """How a question's candidate pool is drawn: a benchmark's `pooling:` section."""

    size: int = 10                 # candidates per question
    max_seed_neighbors: int = 2    # graph neighbours of the seeds added to the seed documents
    hard_negatives: int = 4        # top BM25/dense non-seed hits
    # text the blind solver reads per candidate; None: its share of the solver's context (`doc_chars`)
    max_doc_chars: int | None = None
    context_tokens: int = SOLVER_CONTEXT_TOKENS
    seed: int = 0                  # the draw: random members, and (seed > 0) hard negatives among 2x the top hits
    # the retrievers' top candidates (BM25 and dense in turn) added after the seeds, gold or not: what a retriever
    # would show for the question, judged whatever the benchmark's gold says (a questions file without gold has
    # nothing else to pool from). 0: only the seeds, the hard negatives and random documents.
    top_candidates: int = 0
    # gold files: at most this share of the pool from their chunks, and at most `per_file` chunks of one file
    gold_share: float = 0.5
    per_file: int = 4

    @property
    def doc_chars(self) -> int:
        """Characters of each document the solver reads: `max_doc_chars`, else the pool's share of the solver's
        context (every document of the pool fits at once: a trial may show them all)."""
        return document_chars(self.size, self.context_tokens, self.max_doc_chars)

    @property
    def gold_room(self) -> int:
        return max(1, int(self.size * self.gold_share))


def pool_params(settings: dict, **overrides) -> PoolParams:
    """A benchmark's pool parameters: its `pool_settings` (the registry's `pooling:` with the loader's defaults)."""
    return PoolParams(**{**settings, **{k: v for k, v in overrides.items() if v is not None}})


def _rng(config: PoolParams, qid: str) -> random.Random:
    return random.Random(f"{config.seed}:{qid}")  # per-question: pools do not change when others are added


def rank_in_file(index: CorpusIndex, text: str, chunk_ids: list[str]) -> list[str]:
    """`chunk_ids` (one file's chunks) best first by BM25 on `text`; chunks without a matching term keep their file
    order after the others."""
    hits = [h.chunk_id for h in index.search(text, k=len(chunk_ids), method="bm25", within=chunk_ids)]
    return list(dict.fromkeys(hits + list(chunk_ids)))


def chunks_by_file(index: CorpusIndex, bench: Benchmark) -> dict[str, list[str]]:
    """Each gold file of `bench` -> its chunks in the index, in corpus order (read once for all its questions)."""
    gold = {f for files in bench.gold_files.values() for f in files}
    out: dict[str, list[str]] = {}
    for chunk_id, f in bench.file_of.items():
        if f in gold and chunk_id in index.position:
            out.setdefault(f, []).append(chunk_id)
    return out


def gold_file_seeds(index: CorpusIndex, bench: Benchmark, qid: str, config: PoolParams,
                    by_file: dict[str, list[str]] | None = None) -> list[str]:
    """The chunks of the question's gold files that seed its pool: each file's chunks ranked by the question and
    its accepted answers, taken in turn from each file (at most `per_file` of one, `gold_room` in all).
    `by_file`: `chunks_by_file(index, bench)`, made here when not given."""
    files = bench.gold_files.get(qid, ())
    if not files:
        return []
    known = chunks_by_file(index, bench) if by_file is None else by_file
    by_file = {f: known.get(f, []) for f in files}
    text = " ".join([bench.queries[qid], bench.answers.get(qid, ""), *bench.aliases.get(qid, [])])
    per_file = min(config.per_file, max(1, config.gold_room // len(files)))
    ranked = [rank_in_file(index, text, sorted(ids, key=index.position.get))[:per_file]
              for ids in by_file.values() if ids]
    turns = [c for depth in range(per_file) for r in ranked if depth < len(r) for c in [r[depth]]]
    return turns[:config.gold_room]


def build_pool(index: CorpusIndex, bench: Benchmark, qid: str, config: PoolParams,
               neighbors: Callable[[str], list[tuple[str, str, float]]] | None = None,
               by_file: dict[str, list[str]] | None = None) -> list[tuple[str, str]]:
    """[(chunk_id, origin)] for one question, shuffled; `by_file` as `gold_file_seeds` takes it."""
    rng = _rng(config, qid)
    universe = bench.within[qid] if bench.within else None
    gold_files = set(bench.gold_files.get(qid, ()))
    # a gold file's chunks come ranked (gold_file_seeds), never as judged: its evidence chunks are the truth, and
    # the labels must be made the same way without it
    seeds = [d for d, rel in bench.qrels.get(qid, {}).items()
             if rel > 0 and d in index.position and bench.file_of.get(d) not in gold_files]
    seeds += [d for d in gold_file_seeds(index, bench, qid, config, by_file) if d not in seeds]
    chosen: dict[str, str] = {d: "seed" for d in seeds[: config.size]}

    def add_neighbors():
        for s in seeds:
            for n, _rel, _w in (neighbors(s) if neighbors else [])[: config.max_seed_neighbors]:
                if len(chosen) < config.size and n not in chosen and (universe is None or n in universe):
                    chosen[n] = "seed_neighbor"

    # a gold file's chunks have their graph neighbours after the top candidates and the negatives: a page's best
    # chunks and their neighbours filled the pool, and nothing a retriever would show was judged
    if not gold_files:
        add_neighbors()
    query = bench.queries[qid]
    if config.top_candidates:
        ranked = [index.search(query, k=config.size + len(chosen), method=m, within=universe) for m in ("bm25", "dense")]
        tops = [h.chunk_id for pair in zip(*ranked) for h in pair]
        added = 0
        for doc in dict.fromkeys(tops):
            if added >= config.top_candidates or len(chosen) >= config.size:
                break
            if doc not in chosen:
                chosen[doc] = "top_candidate"
                added += 1

    def elsewhere(doc: str) -> bool:   # negatives come from other files than the gold ones
        return doc not in chosen and (not gold_files or bench.file_of.get(doc) not in gold_files)

    for method in ("bm25", "dense"):
        taken = sum(1 for o in chosen.values() if o == "hard_negative")
        want = (config.hard_negatives + 1) // 2 if method == "bm25" else config.hard_negatives - taken
        hits = [h.chunk_id for h in index.search(query, k=config.size + len(chosen) + 4 * len(seeds), method=method,
                                                 within=universe) if elsewhere(h.chunk_id)]
        if config.seed:   # another draw: the hard negatives among twice as many top hits
            hits = rng.sample(hits[: 2 * want], min(len(hits), max(0, 2 * want)))
        for doc in hits:
            if want <= 0 or len(chosen) >= config.size:
                break
            if elsewhere(doc):
                chosen[doc] = "hard_negative"
                want -= 1
    if gold_files:
        add_neighbors()
    rest = [d for d in (universe or index.ids) if elsewhere(d)]
    for d in rng.sample(list(rest), min(len(rest), config.size - len(chosen))):
        chosen[d] = "random"
    items = list(chosen.items())
    rng.shuffle(items)
    return items


def build_pools(index: CorpusIndex, bench: Benchmark, query_ids: list[str], config: PoolParams,
                neighbors=None) -> pd.DataFrame:
    rows = []
    budget = config.doc_chars
    split = bool(getattr(index, "split_identifiers", False))
    by_file = chunks_by_file(index, bench)
    for qid in query_ids:
        for pos, (chunk_id, origin) in enumerate(build_pool(index, bench, qid, config, neighbors, by_file)):
            row = index.chunks.iloc[index.position[chunk_id]]
            path = str(row["path"]) if "path" in row and str(row.get("source", "")) in FILE_SOURCES else ""
            kept = fit_passage(str(row["text"]), bench.queries[qid], budget, split)
            rows.append((bench.name, qid, bench.queries[qid], bench.answers.get(qid, ""),
                         list(bench.aliases.get(qid, [])), chunk_id, origin, pos, str(row["title"]),
                         kept.text, path, kept.length, kept.start, kept.end))
    return pd.DataFrame(rows, columns=POOL_COLUMNS)
