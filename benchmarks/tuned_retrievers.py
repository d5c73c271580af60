"""Tune every tunable retriever of a benchmark on its train split (the code of the tuned_retriever_configs asset),
then score the defaults, the similarity baselines and the tuned configurations on the held-out split.

    python benchmarks/tuned_retrievers.py --benchmark scifact
    python benchmarks/tuned_retrievers.py --benchmark hotpotqa --base data/parquet

Reads a materialized corpus index (and graph, and MC labels when present) under --base; writes the tuned
configuration to data/benchmarks/tuned/<benchmark>/ (the same versioned store the asset uses) and the figures to
data/benchmarks/tuned_retrievers_<benchmark>.json. The held-out split is the registry's first eval split that
shares no query with the tune split (SciFact: test; HotpotQA: the test half). No LLM is started here, so the
causal retriever is tuned with its offline lexical fallback and the learned model without the question-likelihood
feature (`tuning.learned_question_likelihood`); `benchmarks/causal_gate.py` tunes and scores it with
the LLM's answer likelihood, as the asset does wherever the `llm` resource scores prompts.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT_DIR, PARQUET, Figure, machine, write_result  # noqa: E402

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.measures.metrics import evaluate, warm_up  # noqa: E402
from causal_assets.core.evaluation.runner import run_benchmark  # noqa: E402
from causal_assets.core.graph.store import load_chunk_neighbors, load_graph  # noqa: E402
from causal_assets.core.index.search import CorpusIndex  # noqa: E402
from causal_assets.core.retrievers.factory import build_retriever  # noqa: E402
from causal_assets.core.foundation.storage import asset_path, read_parquet  # noqa: E402
from causal_assets.core.tuning.search import tune  # noqa: E402
from causal_assets.core.registry.tuning import TuningSpec  # noqa: E402
from causal_assets.core.stored.tuned import index_fingerprint, save_tuned  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

BASELINES = ("bm25", "tfidf", "dense", "hybrid", "rrf")


def held_out_split(spec, train_ids: set[str]):
    for split in spec.eval_splits:
        bench = load_benchmark(spec, split)
        if not train_ids & set(bench.queries):
            return bench
    if "test" in spec.splits:
        return load_benchmark(spec, "test")
    raise SystemExit(f"{spec.name}: no eval split is disjoint from the tune split")


def score(index, bench, name, kind, params, neighbors, graph) -> dict:
    t0 = time.perf_counter()
    rr = run_benchmark(build_retriever(kind, index, params, neighbors, None, graph), bench, 100, name)
    m = evaluate(bench.qrels, rr.run, ks=(1, 2, 5, 10, 100), map_k=10)
    out = {f"{r.metric}@{r.k}": round(float(r.value), 5) for r in m.itertuples()}
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", required=True)
    ap.add_argument("--base", type=Path, default=PARQUET, help="Parquet base with the materialized index")
    ap.add_argument("--retrievers", nargs="*", help="tune only these (default: the registry's tuning list)")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    args = ap.parse_args()

    started = machine()
    spec = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)[args.benchmark]
    tuning = TuningSpec.model_validate({**spec.tuning, **({"retrievers": args.retrievers} if args.retrievers else {})})
    index = CorpusIndex.load(args.base, spec.corpus)
    graph, neighbors = load_graph(args.base, spec.corpus), load_chunk_neighbors(args.base, spec.corpus)
    labels_path = asset_path(args.base, "mc_labels", spec.name)
    mc_labels = read_parquet(labels_path) if labels_path.exists() else None
    train = load_benchmark(spec, spec.tune_split)
    held = held_out_split(spec, set(train.queries))
    warm_up()

    t0 = time.perf_counter()
    result = tune(index, train, tuning, spec.retrievers, neighbors, graph, mc_labels,
                  forbidden=(held.split,), log=lambda m: print(m, flush=True))
    tune_s = time.perf_counter() - t0
    content = {"benchmark": spec.name, "corpus": spec.corpus, "tune_split": spec.tune_split, "metric": tuning.metric,
               "index": index_fingerprint(index), "graph": graph is not None, "selected": result.selected,
               "retrievers": result.best}
    stored = save_tuned(args.out / "tuned", spec.name, content, result.models)
    print(f"tuned in {tune_s:.0f}s -> {stored.path}", flush=True)

    hybrid_weight = result.best.get("hybrid", {}).get("params", {}).get("weight", 0.5)
    plan = [(n, n, {"weight": hybrid_weight} if n == "hybrid" else {}) for n in BASELINES]
    plan += [(n, n, spec.retrievers.get(n, {})) for n in ("cascade", "entity_first")
             if n in spec.retrievers and (n != "entity_first" or held.within)]
    if "causal" in result.best:
        plan.append(("causal", "causal", {}))   # the defaults: lexical answer model, hybrid shortlist
    plan += [(f"{n}_tuned", n, stored.params(n)) for n in stored.retrievers]
    held_out = {}
    for name, kind, params in plan:
        held_out[name] = score(index, held, name, kind, params, neighbors, graph)
        print(f"{held.split}/{name}: {tuning.metric} {held_out[name][tuning.metric]:.4f}  "
              f"ndcg@10 {held_out[name]['ndcg@10']:.4f}  map@10 {held_out[name]['map@10']:.4f}", flush=True)

    metric = tuning.metric
    similarity = {n: held_out[n][metric] for n in BASELINES}
    best_sim = max(similarity, key=similarity.get)
    selected = f"{result.selected}_tuned"
    figures = [
        Figure(f"{spec.name} {held.split} {metric}, selected tuned config ({selected}, chosen on {train.split})",
               held_out[selected][metric], metric,
               0.73 if (spec.name == "scifact" and metric == "ndcg@10") else None,
               ">=" if (spec.name == "scifact" and metric == "ndcg@10") else None,
               note="target 0.75; baselines BM25 0.679, MiniLM 0.645, z-hybrid 0.737" if spec.name == "scifact" else ""),
        Figure(f"{spec.name} {held.split} {metric}, best similarity baseline ({best_sim})", similarity[best_sim], metric),
    ]
    if "learned_tuned" in held_out:
        figures.append(Figure(f"{spec.name} {held.split} {metric}, learned model", held_out["learned_tuned"][metric],
                              metric, note=f"relative to {best_sim}: "
                              f"{(held_out['learned_tuned'][metric] / similarity[best_sim] - 1) * 100:+.1f}%"))
    details = {"benchmark": spec.name, "tune_split": train.split, "tune_queries": len(train.query_ids()),
               "held_out_split": held.split, "held_out_queries": len(held.query_ids()),
               "tuning_seconds": round(tune_s, 1), "config_version": stored.version, "config_path": str(stored.path),
               "selected": result.selected, "train_best": result.best, "held_out": held_out,
               "trials": result.trials.to_dict(orient="records"), "mc_labels": mc_labels is not None}
    write_result(f"tuned_retrievers_{spec.name}", figures, details, started, quick=False, out_dir=args.out)


if __name__ == "__main__":
    main()
