"""Candidate pools: per question, the seed documents ∪ the retrievers' top candidates ∪ hard negatives ∪ random
documents.

The seed documents come from benchmark metadata (qrels / supporting paragraphs / the mined target) plus, when a graph is
given, the seeds' graph neighbours (what the target imports or calls). Hard negatives are the top
BM25 and dense hits that are not seeds. Random documents fill the rest. Downstream every candidate is treated
identically; the origin is kept only as metadata, and the pool order is shuffled so position leaks nothing.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.index.search import CorpusIndex

POOL_COLUMNS = ["benchmark", "question_id", "question", "answer", "aliases", "doc_id", "origin", "position",
                "title", "text", "path"]
# Corpora whose chunks name a file relative to the corpus's root: the pools (and the label exports) carry it beside the
# document id. Other loaders' `path` is the dataset file itself, the same for every document.
FILE_SOURCES = ("folder", "python_package")


@dataclass(frozen=True)
class PoolParams:
    """How a question's candidate pool is drawn: a benchmark's `pooling:` section."""

    size: int = 10                 # candidates per question
    max_seed_neighbors: int = 2    # graph neighbours of the seeds added to the seed documents
    hard_negatives: int = 4        # top BM25/dense non-seed hits
    max_doc_chars: int = 600       # text the blind solver sees per candidate (small local models: short contexts)
    seed: int = 0
    # the retrievers' top candidates (BM25 and dense in turn) added after the seeds, gold or not: what a retriever
    # would show for the question, judged whatever the benchmark's gold says (a questions file without gold has
    # nothing else to pool from). 0: only the seeds, the hard negatives and random documents.
    top_candidates: int = 0


def _rng(config: PoolParams, qid: str) -> random.Random:
    return random.Random(f"{config.seed}:{qid}")  # per-question: pools do not change when others are added


def build_pool(index: CorpusIndex, bench: Benchmark, qid: str, config: PoolParams,
               neighbors: Callable[[str], list[tuple[str, str, float]]] | None = None) -> list[tuple[str, str]]:
    """[(doc_id, origin)] for one question, shuffled."""
    rng = _rng(config, qid)
    universe = bench.within[qid] if bench.within else None
    seeds = [d for d, rel in bench.qrels.get(qid, {}).items() if rel > 0 and d in index.position]
    chosen: dict[str, str] = {d: "seed" for d in seeds[: config.size]}
    if neighbors:
        for s in seeds:
            for n, _rel, _w in neighbors(s)[: config.max_seed_neighbors]:
                if len(chosen) < config.size and n not in chosen and (universe is None or n in universe):
                    chosen[n] = "seed_neighbor"
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
    for method in ("bm25", "dense"):
        taken = sum(1 for o in chosen.values() if o == "hard_negative")
        want = (config.hard_negatives + 1) // 2 if method == "bm25" else config.hard_negatives - taken
        for hit in index.search(query, k=config.size + len(chosen), method=method, within=universe):
            if want <= 0 or len(chosen) >= config.size:
                break
            if hit.chunk_id not in chosen:
                chosen[hit.chunk_id] = "hard_negative"
                want -= 1
    rest = [d for d in (universe or index.ids) if d not in chosen]
    for d in rng.sample(list(rest), min(len(rest), config.size - len(chosen))):
        chosen[d] = "random"
    items = list(chosen.items())
    rng.shuffle(items)
    return items


def build_pools(index: CorpusIndex, bench: Benchmark, question_ids: list[str], config: PoolParams,
                neighbors=None) -> pd.DataFrame:
    rows = []
    for qid in question_ids:
        for pos, (doc_id, origin) in enumerate(build_pool(index, bench, qid, config, neighbors)):
            row = index.chunks.iloc[index.position[doc_id]]
            path = str(row["path"]) if "path" in row and str(row.get("source", "")) in FILE_SOURCES else ""
            rows.append((bench.name, qid, bench.queries[qid], bench.answers.get(qid, ""),
                         list(bench.aliases.get(qid, [])), doc_id, origin, pos, str(row["title"]),
                         str(row["text"])[: config.max_doc_chars], path))
    return pd.DataFrame(rows, columns=POOL_COLUMNS)
