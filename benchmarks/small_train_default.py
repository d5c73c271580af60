"""Which retriever to fall back to when a few train questions cannot separate the candidates: the measurement behind
`TuningSpec.robust_default` (docs/sizing.md, "Choosing a retriever on few questions").

    python benchmarks/small_train_default.py [--base data/parquet] [--benchmarks default hotpotqa musique 2wiki]
        [--sizes 8 16] [--draws 5] [--retrievers hybrid rrf cascade learned]

For each shipped benchmark under --base and each size n, seeded samples of n train questions are tuned with a
questions benchmark's default candidates (`tune()`, no labels, no LLM), and every tuned candidate is scored on the
whole `test` split. The robust default has the best mean test figure over every benchmark and size and is never
far behind the best: chosen on the shipped benchmarks, for users with too few train questions to choose with.
Writes data/benchmarks/small_train_default.json.
"""
from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PARQUET, load_average, machine, write_json  # noqa: E402

from causal_assets.core.stored.artifacts import CorpusArtifacts  # noqa: E402
from causal_assets.core.benchmarks import load_benchmark_registry, restrict  # noqa: E402
from causal_assets.core.evaluation.metrics import evaluate, parse_metric  # noqa: E402
from causal_assets.core.evaluation.runner import run_benchmark  # noqa: E402
from causal_assets.core.index.ann import AnnConfig  # noqa: E402
from causal_assets.core.retrievers.factory import build_retriever  # noqa: E402
from causal_assets.core.tuning.search import compare_nested, tune  # noqa: E402
from causal_assets.core.tuning.spec import TuningSpec  # noqa: E402
from causal_assets.core.stored.tuned import save_tuned  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()
ANN = AnnConfig(min_chunks=SETTINGS.ann_min_chunks)


def test_figure(index, test, kind: str, params: dict, neighbors, graph, metric: str) -> float:
    name, k = parse_metric(metric)
    retriever = build_retriever(kind, index, params, neighbors, None, graph, None)
    run = run_benchmark(retriever, test, 100, kind)
    table = evaluate(test.qrels, run.run, ks=(k,), map_k=k)
    return float(table[(table.metric == name) & (table.k == k)]["value"].iloc[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=str(PARQUET))
    parser.add_argument("--benchmarks", nargs="+", default=["default", "hotpotqa", "musique", "2wiki"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[8, 16])
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--retrievers", nargs="+", default=["hybrid", "rrf", "cascade", "learned"])
    args = parser.parse_args()
    started = machine()
    registry = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)
    samples = []
    with tempfile.TemporaryDirectory() as store:
        for name in args.benchmarks:
            spec = registry[name]
            artifacts = CorpusArtifacts(args.base, spec.corpus, ANN)
            try:
                index = artifacts.index
            except (OSError, ValueError) as e:
                print(f"{name}: no index under {args.base} ({e}); left out", flush=True)
                continue
            graph, neighbors = artifacts.graph, artifacts.neighbors
            train, test = artifacts.benchmark(spec, spec.tune_split), artifacts.benchmark(spec, "test")
            metric = spec.tuning.get("metric") or "ndcg@10"
            # a user's questions benchmark: the default candidates, one fold split, no labels, no LLM, no default
            tspec = TuningSpec(retrievers=args.retrievers, metric=metric, robust_default=None)
            listed = {r: {} for r in args.retrievers}
            qids = train.query_ids()
            for n in args.sizes:
                for draw in range(args.draws):
                    t0 = time.perf_counter()
                    chosen = sorted(np.random.default_rng(1000 * n + draw).choice(len(qids), n, replace=False))
                    sub = restrict(train, [qids[i] for i in chosen])
                    result = tune(index, sub, tspec, listed, neighbors, graph)
                    stored = save_tuned(store, f"{name}-{n}-{draw}", {"retrievers": copy.deepcopy(result.best)},
                                        result.models)
                    figures = {r: test_figure(index, test, r, stored.params(r), neighbors, graph, metric)
                               for r in result.best}
                    by_default = {}
                    for default in args.retrievers:
                        best = copy.deepcopy(result.best)
                        compare_nested(best, result.nested, 1, default)
                        by_default[default] = next(r for r, b in best.items() if b.get("selected"))
                    sample = {"benchmark": name, "n": n, "draw": draw, "metric": metric, "test_queries":
                              len(test.query_ids()), "test": {r: round(v, 4) for r, v in figures.items()},
                              "nested": {r: round(float(np.mean(list(v.values()))), 4)
                                         for r, v in result.nested.items()},
                              "selected": result.selected, "selected_with_default": by_default,
                              "seconds": round(time.perf_counter() - t0, 1), "load": load_average()}
                    samples.append(sample)
                    print(f"{name} n={n} draw {draw}: test {sample['test']}; selected {result.selected}; "
                          f"with each default {by_default} ({sample['seconds']} s, load {sample['load']})",
                          flush=True)
    summary = summarize(samples, args.retrievers)
    for line in summary["lines"]:
        print(line)
    write_json("small_train_default", {"machine": started, "args": vars(args), "samples": samples,
                                            "summary": summary})


def summarize(samples: list[dict], candidates: list[str]) -> dict:
    """Per (benchmark, n) and overall: each candidate's mean test figure, its mean shortfall to the best candidate
    of the same sample, and the mean test figure of the retriever each policy selects (nested choice alone, or with
    each candidate as the robust default)."""
    groups = sorted({(s["benchmark"], s["n"]) for s in samples})
    policies = ["nested only", *[f"default {c}" for c in candidates]]

    def policy_figure(s: dict, policy: str) -> float:
        pick = s["selected"] if policy == "nested only" else s["selected_with_default"][policy.split(" ", 1)[1]]
        return s["test"][pick]

    table, lines = {}, []
    for group in [*groups, ("all", 0)]:
        rows = [s for s in samples if group[0] == "all" or (s["benchmark"], s["n"]) == group]
        if not rows:
            continue
        key = "all" if group[0] == "all" else f"{group[0]} n={group[1]}"
        table[key] = {
            "candidate_mean": {c: round(float(np.mean([s["test"][c] for s in rows])), 4) for c in candidates},
            "candidate_shortfall": {c: round(float(np.mean([max(s["test"].values()) - s["test"][c] for s in rows])),
                                             4) for c in candidates},
            "policy_mean": {p: round(float(np.mean([policy_figure(s, p) for s in rows])), 4) for p in policies},
            "samples": len(rows)}
        lines.append(f"{key}: candidates {table[key]['candidate_mean']}; shortfall to the sample's best "
                     f"{table[key]['candidate_shortfall']}; policies {table[key]['policy_mean']}")
    return {"table": table, "lines": lines}


if __name__ == "__main__":
    main()
