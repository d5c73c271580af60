"""Run retrievers over a benchmark and score them: the pure core of the evaluation report."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.registry.gold import collapse_to_files
from causal_assets.core.measures.metrics import Run, evaluate
from causal_assets.core.foundation.progress import Progress
from causal_assets.core.retrievers.base import Retriever

RUN_DEPTH = 100  # results kept per query: enough for Recall@100


@dataclass
class RetrieverRun:
    retriever: str
    run: Run
    frame: pd.DataFrame      # query_id, chunk_id, rank, score
    seconds: float


def run_benchmark(retriever: Retriever, bench: Benchmark, depth: int = RUN_DEPTH, name: str | None = None,
                  progress: Callable[[str], None] | None = None) -> RetrieverRun:
    """Every judged query of `bench` through `retriever`. `progress`: where to report queries done / total, rate and
    ETA (every 30 s, silent for runs shorter than 10 s: e.g. measurements re-read from the call cache) for
    retrievers slow per query (the causal one asks an LLM); the queries then go one at a time, not as one batch."""
    qids = bench.query_ids()
    texts = [bench.queries[q] for q in qids]
    within = [bench.within[q] for q in qids] if bench.within else None
    t0 = time.perf_counter()
    if progress is None:
        results = retriever.retrieve_many(texts, depth, within)
    else:
        def emit(line: str) -> None:
            if time.perf_counter() - t0 >= 10:
                progress(line)
        meter = Progress(len(qids), f"{name or retriever.name} on {bench.split}: queries", emit, every_s=30)
        results = []
        for i, text in enumerate(texts):
            results += retriever.retrieve_many([text], depth, [within[i]] if within else None)
            meter.update(i + 1)
    seconds = time.perf_counter() - t0
    rows = [(q, h.chunk_id, h.rank, h.score) for q, hits in zip(qids, results) for h in hits]
    frame = pd.DataFrame(rows, columns=["query_id", "chunk_id", "rank", "score"])
    # Scores for ranx: rank-derived, so the order is exactly the retriever's (no tie reshuffling).
    run = {q: {h.chunk_id: float(depth - h.rank + 1) for h in hits} for q, hits in zip(qids, results)}
    # a question judged at file level is scored by each file's best chunk (`registry.gold`)
    run = {q: collapse_to_files(r, bench.file_of) if q in bench.file_level else r for q, r in run.items()}
    return RetrieverRun(name or retriever.name, run, frame, seconds)


def score_run(bench: Benchmark, rr: RetrieverRun, ks=(1, 2, 3, 5, 10, 20, 100)) -> pd.DataFrame:
    metrics = evaluate(bench.qrels, rr.run, ks=ks)
    metrics.insert(0, "retriever", rr.retriever)
    return metrics


def metric_value(metrics: pd.DataFrame, metric: str, k: int) -> float:
    row = metrics[(metrics["metric"] == metric) & (metrics["k"] == k)]
    return float(row["value"].iloc[0])
