"""The causal retriever's target: MAP@10 of causal retrieval against the best similarity retriever and the learned
model, on the held-out `test` half of a multi-hop benchmark.

    python benchmarks/causal_gate.py --benchmark hotpotqa --base data/parquet
    python benchmarks/causal_gate.py --benchmark musique --base data/parquet --scorer-questions 0
    python benchmarks/causal_gate.py --benchmark 2wiki --base data/parquet --scorer-questions 20

Each question ranks its own paragraphs; relevance = its supporting paragraphs. Everything tuned comes from
`benchmarks/tuned_retrievers.py --benchmark <name>` (train half only). Rows: the similarity baselines, the causal
retriever with its defaults and tuned (offline lexical answer model), the learned model, and with
`--scorer-questions N` (0 = every test question, -1 = none) the tuned causal retriever with the LLM's answer
likelihood on the first N questions, every row re-scored on them with paired randomization tests and seconds per
query.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT_DIR, PARQUET, Figure, machine, write_result  # noqa: E402

from causal_assets.core.registry.benchmarks import Benchmark, load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.measures.metrics import evaluate, evaluate_per_query, warm_up  # noqa: E402
from causal_assets.core.measures.significance import randomization_p  # noqa: E402
from causal_assets.core.llm.cache import CallCache  # noqa: E402
from causal_assets.core.llm.models import DEFAULT_SOLVER, local_scorer  # noqa: E402
from causal_assets.core.evaluation.runner import run_benchmark  # noqa: E402
from causal_assets.core.graph.store import load_chunk_neighbors, load_graph  # noqa: E402
from causal_assets.core.index.search import CorpusIndex  # noqa: E402
from causal_assets.core.retrievers.factory import build_retriever  # noqa: E402
from causal_assets.core.tuning.search import tune  # noqa: E402
from causal_assets.core.registry.retrievers import KINDS  # noqa: E402
from causal_assets.core.registry.tuning import TuningSpec  # noqa: E402
from causal_assets.core.stored.tuned import index_fingerprint, load_tuned  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

SIMILARITY = ("bm25", "tfidf", "dense", "hybrid", "rrf")


def subset(bench: Benchmark, ids: list[str]) -> Benchmark:
    return Benchmark(bench.name, bench.split, {q: bench.queries[q] for q in ids}, {q: bench.qrels[q] for q in ids},
                     {q: bench.within[q] for q in ids}, {q: bench.answers[q] for q in ids if q in bench.answers})


def measure(index, bench, kind, params, neighbors, graph, scorer=None) -> dict:
    t0 = time.perf_counter()
    rr = run_benchmark(build_retriever(kind, index, params, neighbors, None, graph, scorer), bench, 10, kind)
    seconds = time.perf_counter() - t0
    m = evaluate(bench.qrels, rr.run, ks=(2, 10), map_k=10)
    per_query = evaluate_per_query(bench.qrels, rr.run, ks=(10,), map_k=10)
    ap = per_query[per_query.metric == "map"].set_index("query_id")["value"]
    out = {f"{r.metric}@{r.k}": round(float(r.value), 5) for r in m.itertuples()}
    n = len(bench.query_ids())
    return {**out, "seconds": round(seconds, 1), "seconds_per_query": round(seconds / max(n, 1), 2), "queries": n,
            "_ap": {q: float(v) for q, v in ap.items()}}


def relative(a: float, b: float) -> float:
    return round((a / b - 1) * 100, 2)


def paired(a: dict, b: dict) -> dict:
    """MAP@10 of a vs b on the same questions: relative change and a paired randomization test."""
    qids = sorted(a["_ap"])
    x, y = np.array([b["_ap"][q] for q in qids]), np.array([a["_ap"][q] for q in qids])
    return {"change_pct": relative(a["map@10"], b["map@10"]), "p": round(randomization_p(x, y), 4)}


def public(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("_")}


def tune_causal(index, train, lexical: dict, neighbors, graph, scorer, args) -> dict[str, tuple[dict, dict]]:
    """The causal retriever tuned on the train split by the product's tuner with the likelihood model: its weights
    (the product's grid, `KINDS["causal"].space["weights"]`, which includes the shortlist's own order as a prior:
    its train figure alone says what the measures add) and min_relevance searched, its candidates (shortlist,
    sizes, chain options) those the lexical tuning chose, the diversity filter off (a ranking for MAP keeps every
    candidate; the filter's context sets would double the prompts). The tuner searches the same space with the
    lexical model first (its candidate stage), so one tuning gives both rows: {answer model: (params, tuning)}."""
    fixed = {k: v for k, v in lexical.items()
             if k not in ("weights", "min_relevance", "shortlist_params", "answer_model")}
    listed = {"causal": {**fixed, "answer_model": "likelihood", "diversity_threshold": 0.0,
                         "answer_model_params": {"max_doc_chars": args.max_doc_chars}}}
    space = {k: [lexical[k]] for k in KINDS["causal"].space if k in lexical and k not in ("weights", "min_relevance")}
    space.update(weights=KINDS["causal"].space["weights"],
                 min_relevance=sorted({0.0, float(lexical.get("min_relevance", 0.1))}))
    # learned is tuned again (cross-validated, as the product's tuning does) so that a learned shortlist ranks each
    # train query by the fold model that never saw it; the test rows use the stored model fitted on all of train
    spec = TuningSpec(retrievers=["learned", "causal"] if lexical.get("shortlist") == "learned" else ["causal"],
                      metric="map@10", passes=1, spaces={"causal": space}, max_queries={"causal": args.train_questions},
                      learned_targets=["qrels"])
    result = tune(index, train, spec, listed, neighbors, graph, forbidden=("test",), scorer=lambda: scorer)
    causal = result.trials[result.trials["retriever"] == "causal"]
    out = {}
    for model, stage in causal.groupby(causal["params"].map(lambda p: json.loads(p)["answer_model"])):
        chosen = stage[stage["best"]].iloc[0]
        params = json.loads(chosen["params"])
        if params.get("shortlist") == "learned":
            params["shortlist_params"] = lexical["shortlist_params"]
        trials = [{"weights": (t := json.loads(r.params))["weights"], "min_relevance": t["min_relevance"],
                   "map@10": round(float(r.value), 5)} for r in stage.itertuples()]
        out[model] = params, {"value": float(chosen["value"]), "queries": int(chosen["queries"]), "trials": trials,
                              "split": train.split}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="hotpotqa", help="a multi-hop benchmark: hotpotqa | musique | 2wiki")
    ap.add_argument("--base", type=Path, default=PARQUET, help="Parquet base with the corpus index and graph")
    ap.add_argument("--tuned", type=Path, default=OUT_DIR / "tuned", help="store of tuned_retrievers.py")
    ap.add_argument("--version", help="tuned configuration version (default: the one tuned_retrievers.py recorded "
                                      "in tuned_retrievers_<benchmark>.json)")
    ap.add_argument("--scorer-questions", type=int, default=0,
                    help="the LLM answer-likelihood row on the first N test questions (0: all, -1: none)")
    ap.add_argument("--solver", default=DEFAULT_SOLVER, help="packaged local model that scores")
    ap.add_argument("--train-questions", type=int, default=150,
                    help="train questions the likelihood weights are tuned on (a seeded sample)")
    ap.add_argument("--max-doc-chars", type=int, default=400, help="document cut in the likelihood prompts")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    args = ap.parse_args()

    started = machine()
    name = args.benchmark
    spec = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)[name]
    index = CorpusIndex.load(args.base, spec.corpus)
    graph, neighbors = load_graph(args.base, spec.corpus), load_chunk_neighbors(args.base, spec.corpus)
    recorded = args.out / f"tuned_retrievers_{name}.json"
    version = args.version or (json.loads(recorded.read_text())["details"]["config_version"]
                               if recorded.exists() else None)
    tuned = load_tuned(args.tuned, name, version) if version else None
    if tuned is None or tuned.content["index"] != index_fingerprint(index):
        raise SystemExit(f"run benchmarks/tuned_retrievers.py --benchmark {name} on this index first")
    test = load_benchmark(spec, "test")
    assert not set(test.queries) & set(load_benchmark(spec, tuned.content["tune_split"]).queries)
    warm_up()

    weight = tuned.params("hybrid")["weight"]

    def similarity_params(n):
        return {"weight": weight} if n == "hybrid" else {}

    def rows_on(bench) -> dict:
        rows = {n: measure(index, bench, n, similarity_params(n), neighbors, graph) for n in SIMILARITY}
        rows["causal"] = measure(index, bench, "causal", {}, neighbors, graph)
        rows["causal_tuned"] = measure(index, bench, "causal", tuned.params("causal"), neighbors, graph)
        rows["learned_tuned"] = measure(index, bench, "learned", tuned.params("learned"), neighbors, graph)
        return rows

    rows = rows_on(test)
    for n, r in rows.items():
        print(f"{name} test/{n}: MAP@10 {r['map@10']:.4f}  P@2 {r['precision@2']:.4f}  ({r['seconds']}s)", flush=True)
    best = max(SIMILARITY, key=lambda n: rows[n]["map@10"])
    ref = rows[best]["map@10"]
    label = f"{name} test MAP@10"
    figures = [
        Figure(f"{label}, best similarity retriever ({best})", ref, "MAP@10"),
        Figure(f"{label}, causal retriever defaults (lexical answer model)", rows["causal"]["map@10"],
               "MAP@10", note=f"{relative(rows['causal']['map@10'], ref):+.1f}% vs {best}"),
        Figure(f"{label} change, causal retriever (lexical) tuned on train vs best similarity",
               relative(rows["causal_tuned"]["map@10"], ref), "%", 15.0, ">=",
               note=f"causal_tuned {rows['causal_tuned']['map@10']:.4f} vs {best} {ref:.4f}, "
                    f"p={paired(rows['causal_tuned'], rows[best])['p']}"),
        Figure(f"{label} change, learned model vs best similarity",
               relative(rows["learned_tuned"]["map@10"], ref), "%",
               note=f"learned {rows['learned_tuned']['map@10']:.4f} vs {best} {ref:.4f}"),
    ]
    details = {"benchmark": name, "split": "test", "questions": len(test.query_ids()),
               "config_version": tuned.version, "tuned_causal_params": tuned.retrievers["causal"]["params"],
               "rows": {n: public(r) for n, r in rows.items()}, "best_similarity": best}
    if args.scorer_questions >= 0:
        ids = test.query_ids()[:args.scorer_questions] if args.scorer_questions else test.query_ids()
        sub = subset(test, ids)
        scorer = local_scorer(args.solver, CallCache(str(args.out / "causal_gate_calls.sqlite")), SETTINGS.models_dir)
        train = load_benchmark(spec, tuned.content["tune_split"])
        t0 = time.perf_counter()
        rows_by_model = tune_causal(index, train, tuned.params("causal"), neighbors, graph, scorer, args)
        (params, tuning), (lex_params, lex_tuning) = rows_by_model["likelihood"], rows_by_model["lexical"]
        print(f"{name} likelihood tuned on {tuning['queries']} {train.split} questions in "
              f"{time.perf_counter() - t0:.0f}s: map@10 {tuning['value']:.4f} with weights {params['weights']}, "
              f"min_relevance {params['min_relevance']}", flush=True)
        t_tokens = scorer.tokens_evaluated
        lik = measure(index, sub, "causal", params, neighbors, graph, scorer)
        lik["tokens_evaluated"] = scorer.tokens_evaluated - t_tokens
        lik["threads"] = scorer.thread_history
        on_sub = dict(rows if len(ids) == len(test.query_ids()) else rows_on(sub))
        on_sub["causal_lexical_same_grid"] = measure(index, sub, "causal", lex_params, neighbors, graph)
        comparisons = {f"vs_{best}": paired(lik, on_sub[best]), "vs_causal_lexical": paired(lik, on_sub["causal_tuned"]),
                       "vs_causal_lexical_same_grid": paired(lik, on_sub["causal_lexical_same_grid"]),
                       "vs_learned": paired(lik, on_sub["learned_tuned"])}
        details["likelihood"] = {"questions": len(ids), "solver": args.solver, "params": params, "tuning": tuning,
                                 "lexical_same_grid": {"params": lex_params, "tuning": lex_tuning},
                                 "causal_likelihood": public(lik), "comparisons": comparisons,
                                 "rows_on_subset": {n: public(r) for n, r in on_sub.items()}}
        print(f"{name} likelihood ({len(ids)} q): causal/likelihood MAP@10 {lik['map@10']:.4f} "
              f"({lik['seconds_per_query']} s/query); {best} {on_sub[best]['map@10']:.4f}, causal/lexical "
              f"{on_sub['causal_tuned']['map@10']:.4f} (same grid {on_sub['causal_lexical_same_grid']['map@10']:.4f}), "
              f"learned {on_sub['learned_tuned']['map@10']:.4f}; {comparisons}")
        figures.append(Figure(f"{label} change, causal retriever with the LLM answer-likelihood model vs {best} "
                              f"({len(ids)} test questions)", comparisons[f"vs_{best}"]["change_pct"], "%", 15.0, ">=",
                              note=f"causal/likelihood {lik['map@10']:.4f} vs {best} {on_sub[best]['map@10']:.4f} "
                                   f"(p={comparisons[f'vs_{best}']['p']}); vs learned "
                                   f"{comparisons['vs_learned']['change_pct']:+.1f}% (p={comparisons['vs_learned']['p']}); "
                                   f"{lik['seconds_per_query']} s/query"))
    write_result(f"causal_gate_{name}", figures, details, started, quick=False, out_dir=args.out)


if __name__ == "__main__":
    main()
