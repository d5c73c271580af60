"""Query-likelihood reranking (`query_likelihood`) on a benchmark's tune split only: does the solver's likelihood of
the query after a document add to a first stage? The decision to offer it for a benchmark is made on these figures.

For each train query the dense top `--depth` are scored by the packaged local solver (Gemma-3-270M, in-process,
through a call cache) with the retriever's own requests (`QueryLikelihoodReranker.request`); the mix
z(dense) + w * z(log P(query | document)) is scored at every w, and the **nested** figure takes, for each of 5 folds
of the train queries, the w that did best on the other folds.

    python benchmarks/query_likelihood.py --benchmark cosqa [--base data/parquet] [--max-queries N]

Reads the materialized index under --base; writes data/benchmarks/query_likelihood_<benchmark>.json. CoSQA's 249
train queries x 20 cost ~10 min on 2 cores (0.13 s a request); a re-run reads the cache.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT_DIR, PARQUET, machine, write_json  # noqa: E402

from causal_assets.core.benchmarks import load_benchmark, load_benchmark_registry  # noqa: E402
from causal_assets.core.evaluation.metrics import named_metric_per_query  # noqa: E402
from causal_assets.core.index.search import CorpusIndex  # noqa: E402
from causal_assets.core.llm.cache import CallCache  # noqa: E402
from causal_assets.core.llm.models import DEFAULT_SOLVER, local_scorer  # noqa: E402
from causal_assets.core.retrievers.query_likelihood import DEFAULT_PROMPT, QueryLikelihoodReranker  # noqa: E402
from causal_assets.core.tuning.spec import TuningSpec  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5)
FOLDS = 5


def zscore_rows(m: np.ndarray) -> np.ndarray:
    return (m - m.mean(1, keepdims=True)) / (m.std(1, keepdims=True) + 1e-12)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="cosqa")
    ap.add_argument("--base", type=Path, default=PARQUET)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--max-queries", type=int, default=None)
    ap.add_argument("--metric", default=None, help="default: the benchmark's tuning metric")
    args = ap.parse_args()
    started = machine()
    settings = Settings.from_env()
    spec = load_benchmark_registry(settings.benchmarks, settings.shared_data, settings.corpora)[args.benchmark]
    tuning = TuningSpec.model_validate(spec.tuning or {})
    metric = args.metric or tuning.metric
    prompt = (tuning.spaces.get("query_likelihood", {}).get("prompt") or [DEFAULT_PROMPT])[0]
    index = CorpusIndex.load(args.base, spec.corpus)
    bench = load_benchmark(spec, spec.tune_split)        # the tune split only: nothing here sees a held-out query
    qids = bench.query_ids()[: args.max_queries]
    vectors = index.embedder.encode_queries([bench.queries[q] for q in qids])
    positions, dense = index.dense_top_k(vectors, args.depth)
    scorer = local_scorer(DEFAULT_SOLVER, CallCache(OUT_DIR / "query_likelihood_calls.sqlite"), settings.models_dir)
    ql = QueryLikelihoodReranker(index, None, scorer, depth=args.depth, prompt=prompt)
    t0 = time.perf_counter()
    results = scorer.score_many([ql.request(bench.queries[q], index.ids[p])
                                 for q, row in zip(qids, positions) for p in row])
    seconds = time.perf_counter() - t0
    logp = np.array([r.best for r in results]).reshape(positions.shape)
    per_weight = {}
    for w in WEIGHTS:
        mixed = zscore_rows(dense) + w * zscore_rows(logp)
        run = {q: {str(index.ids[p]): float(s) for p, s in zip(row, srow)}
               for q, row, srow in zip(qids, positions, mixed)}
        per_weight[w] = named_metric_per_query(bench.qrels, run, metric)
    alone = {q: {str(index.ids[p]): float(s) for p, s in zip(row, srow)} for q, row, srow in zip(qids, positions, logp)}
    fold = np.random.default_rng(0).permutation(len(qids)) % FOLDS
    nested = []
    for f in range(FOLDS):
        inner = [q for q, g in zip(qids, fold) if g != f]
        best = max(WEIGHTS, key=lambda w: np.mean([per_weight[w].get(q, 0.0) for q in inner]))
        nested += [per_weight[best].get(q, 0.0) for q, g in zip(qids, fold) if g == f]
    mean = {str(w): round(float(np.mean([v.get(q, 0.0) for q in qids])), 4) for w, v in per_weight.items()}
    out = {"topic": "query_likelihood", "benchmark": args.benchmark, "split": spec.tune_split, "queries": len(qids),
           "metric": metric, "depth": args.depth, "first_stage": "dense", "solver": DEFAULT_SOLVER, "prompt": prompt,
           "requests": len(results), "score_seconds": round(seconds, 1),
           "likelihood_alone": round(float(np.mean(list(named_metric_per_query(bench.qrels, alone, metric).values()))), 4),
           "by_weight": mean, "dense": mean["0.0"], "nested_cv5": round(float(np.mean(nested)), 4),
           "machine_start": started, "machine_end": machine()}
    print(json.dumps({k: v for k, v in out.items() if not k.startswith("machine")}, indent=1))
    path = write_json(f"query_likelihood_{args.benchmark}", out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
