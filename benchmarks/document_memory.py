"""How much of a learned model's held-out figure is memory of which documents were relevant in training?

On a benchmark whose queries share gold documents (SciFact: claims written from the same cited abstracts), a model
can score well on held-out queries by recognising documents that were positives for *other* training queries. This
script fits learned-model grid points on the tune split (the tuned hybrid's first stage, the tuner's fitting code)
and reports the held-out metric twice: on the held-out queries whose gold document is gold in the tune split
("gold seen in train") and on the others. A gain only on the first group is memory, not ranking. It chooses nothing:
the product's guard is `query_folds` (CV folds keep queries that share a relevant document together).

    python benchmarks/document_memory.py --benchmark scifact [--base data/parquet] [--reports data/reports]

Needs the benchmark's index and a tuned config (for the hybrid weight). Writes data/benchmarks/document_memory.json.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PARQUET, ROOT, machine, write_json  # noqa: E402

from causal_assets.core.stored.artifacts import CorpusArtifacts  # noqa: E402
from causal_assets.core.benchmarks import load_benchmark_registry  # noqa: E402
from causal_assets.core.evaluation.metrics import named_metric_per_query  # noqa: E402
from causal_assets.core.retrievers.learned.features import FeatureExtractor  # noqa: E402
from causal_assets.core.retrievers.learned.retriever import (PARAM_GRID, attach_target, candidate_table,  # noqa: E402
                                                              fit_model, run_from_scores)
from causal_assets.core.storage import asset_path, read_parquet  # noqa: E402
from causal_assets.core.tuning.spec import TuningSpec  # noqa: E402
from causal_assets.core.stored.tuned import load_tuned  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

# Beside the product's grid: the larger trees that folds by query chose on SciFact (left out of PARAM_GRID).
LARGER = ({"learning_rate": 0.05, "max_leaf_nodes": 31, "min_samples_leaf": 50, "max_iter": 300,
           "l2_regularization": 1.0},
          {"objective": "lambdarank", "learning_rate": 0.05, "num_leaves": 31, "min_child_samples": 50,
           "n_estimators": 300, "reg_lambda": 1.0})


def name_of(params: dict) -> str:
    family = "lambdamart" if params.get("objective") == "lambdarank" else "pointwise"
    return f"{family}-{params.get('num_leaves') or params.get('max_leaf_nodes')}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="scifact")
    ap.add_argument("--base", type=Path, default=PARQUET)
    ap.add_argument("--reports", type=Path, default=ROOT / "data" / "reports")
    args = ap.parse_args()
    started = machine()
    settings = Settings.from_env()
    spec = load_benchmark_registry(settings.benchmarks, settings.shared_data, settings.corpora)[args.benchmark]
    tuning = TuningSpec.model_validate(spec.tuning or {})
    held_split = "test" if "test" in spec.eval_splits else spec.eval_splits[0]
    artifacts = CorpusArtifacts(args.base, spec.corpus)
    train, held = artifacts.benchmark(spec, spec.tune_split), artifacts.benchmark(spec, held_split)
    trials = read_parquet(asset_path(args.base, "tuned_retriever_configs", spec.name))
    tuned = load_tuned(args.reports / "tuned", spec.name, str(trials["config_version"].dropna().iloc[0]))
    hybrid = tuned.content["retrievers"].get("hybrid", {}).get("params", {})
    extractor = FeatureExtractor(artifacts.index, artifacts.graph, weight=hybrid.get("weight", 0.7),
                                 within_stats=hybrid.get("within_stats", "corpus"))

    def table(bench):
        ids = bench.query_ids()
        return candidate_table(extractor, {q: bench.queries[q] for q in ids},
                               artifacts.index.embedder.encode_queries([bench.queries[q] for q in ids]),
                               bench.within)

    fit_on, score_on = attach_target(table(train), "qrels", train.qrels), table(held)
    train_gold = {d for q in train.query_ids() for d, g in train.qrels[q].items() if g > 0}
    ids = held.query_ids()
    seen = [q for q in ids if any(d in train_gold for d, g in held.qrels[q].items() if g > 0)]
    unseen = [q for q in ids if q not in set(seen)]
    rows = {}
    for params in (*PARAM_GRID, *LARGER):
        model = fit_model(fit_on, "qrels", params, extractor.settings())
        per = named_metric_per_query({q: held.qrels[q] for q in ids}, run_from_scores(score_on, model.predict(score_on)),
                                     tuning.metric)
        rows[name_of(params)] = {"all": round(float(np.mean([per[q] for q in ids])), 4),
                                 "gold_seen_in_train": round(float(np.mean([per[q] for q in seen])), 4),
                                 "gold_unseen": round(float(np.mean([per[q] for q in unseen])), 4),
                                 "in_product_grid": params in PARAM_GRID}
        print(f"{name_of(params):>14}: {tuning.metric} all {rows[name_of(params)]['all']:.4f}, gold seen in train "
              f"({len(seen)}) {rows[name_of(params)]['gold_seen_in_train']:.4f}, unseen ({len(unseen)}) "
              f"{rows[name_of(params)]['gold_unseen']:.4f}", flush=True)
    out = {"topic": "document_memory", "benchmark": spec.name, "fit_on": spec.tune_split, "held_out": held_split,
           "metric": tuning.metric, "held_out_queries": len(ids), "gold_seen_in_train": len(seen),
           "first_stage": extractor.settings(), "models": rows, "machine_start": started, "machine_end": machine()}
    print(f"wrote {write_json('document_memory', out)}")


if __name__ == "__main__":
    main()
