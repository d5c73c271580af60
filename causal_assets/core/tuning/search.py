"""Parameter search for every tunable retriever, on a benchmark's train split only.

`tune(index, bench, spec, ...)` searches, per retriever, a small documented space (`retrievers.kinds`) and records
every trial it scores. Only the queries of the `bench` passed in are scored, and a split listed in `forbidden` (the
eval splits) is refused. The selection across retrievers uses each one's nested cross-validated figure (`choose`,
`nested_scores`), not its best train figure, which flatters in proportion to the points tried; a combination
(fusion, pairwise, query_likelihood, the causal retriever over its shortlist) is selectable only beyond one standard
error of what it is built on. With `cv_repeats` > 1 every fold-dependent figure is the mean over repeated splits.
How each retriever is searched: docs/pipeline.md ("Tuning").
"""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from causal_assets.core.benchmarks import Benchmark, restrict
from causal_assets.core.evaluation.metrics import named_metric_per_query, parse_metric
from causal_assets.core.evaluation.runner import run_benchmark
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.causal.retriever import CausalRetrievalOptions
from causal_assets.core.retrievers.factory import build_retriever, causal_answer_model, uses_scorer
from causal_assets.core.retrievers.kinds import COMBINATIONS, KINDS
from causal_assets.core.retrievers.learned.features import QUESTION_LIKELIHOOD, FeatureExtractor
from causal_assets.core.retrievers.learned.retriever import (LearnedRetriever, attach_target, candidate_table,
                                                              cross_validate, fit_model, grid_for, query_folds)
from causal_assets.core.tuning.fusion import sweep_fusion_weight
from causal_assets.core.tuning.spec import ORDER, TuningSpec


@dataclass
class TuningResult:
    trials: pd.DataFrame                         # one row per scored point (see `TRIAL_COLUMNS`)
    best: dict[str, dict[str, Any]]              # retriever -> {params, value, evaluation, queries}
    models: dict[str, Any] = field(default_factory=dict)   # retriever -> fitted CausalRelevanceModel
    query_ids: list[str] = field(default_factory=list)     # every query the tuner scored
    selection_note: str = ""                               # how far the selection can be trusted (`compare_nested`)
    nested: dict[str, dict[str, float]] = field(default_factory=dict)   # retriever -> nested figure per train query

    @property
    def selected(self) -> str | None:
        """The selectable retriever with the best nested train figure (`compare_nested` marks it; module docstring).
        A result from before the mark: the best `selection_value` (ties: the earlier in `TUNABLE`), and from before
        `selectable` existed every retriever counts."""
        marked = [n for n, b in self.best.items() if b.get("selected")]
        if marked:
            return marked[0]
        eligible = [n for n, b in self.best.items() if b.get("selectable", True)]
        if not eligible:
            return None
        return max(eligible, key=lambda n: (self.best[n].get("selection_value", self.best[n]["value"]), -ORDER[n]))


TRIAL_COLUMNS = ["retriever", "trial", "params", "metric", "value", "evaluation", "queries", "seconds", "best"]


def nested(params: dict[str, Any]) -> dict[str, Any]:
    """{'graph.max_hops': 1} -> {'graph': {'max_hops': 1}}."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        node = out
        *head, last = key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def flat(params: dict[str, Any], space: dict[str, list[Any]], prefix: str = "") -> dict[str, Any]:
    """Inverse of `nested` down to the keys of `space` (a dict-valued parameter such as `weights` stays whole)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path not in space:
            out.update(flat(value, space, path + "."))
        else:
            out[path] = value
    return out


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def sample_queries(bench: Benchmark, n: int | None, seed: int = 0) -> Benchmark:
    """`bench` restricted to a seeded sample of `n` of its judged queries (all of them when n is None or >=)."""
    qids = bench.query_ids()
    if n is None or n >= len(qids):
        return bench
    keep = sorted(np.random.default_rng(seed).choice(len(qids), n, replace=False))
    return restrict(bench, [qids[i] for i in keep])


class _CachedQueryVectors:
    """The index's embedder with a memo: every trial re-runs the same train queries, so each is embedded once."""

    def __init__(self, inner):
        self.inner = inner
        self.vectors: dict[str, np.ndarray] = {}

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        missing = [q for q in dict.fromkeys(queries) if q not in self.vectors]
        if missing:
            self.vectors.update(zip(missing, self.inner.encode_queries(missing)))
        if not queries:
            return self.inner.encode_queries(queries)
        return np.stack([self.vectors[q] for q in queries])

    def __getattr__(self, name):
        return getattr(self.inner, name)


@contextlib.contextmanager
def cached_query_vectors(index: CorpusIndex) -> Iterator[None]:
    inner = index.embedder
    index.embedder = _CachedQueryVectors(inner)
    try:
        yield
    finally:
        index.embedder = inner


def _given_model(params: dict[str, Any]) -> bool:
    """A learned shortlist's model handed in by the caller (a stored model's file), not one this run trains."""
    given = params.get("shortlist_params") or {}
    return given.get("model") is not None or not str(given.get("model_path") or "@").startswith("@")


def fold_groups(spec: TuningSpec, bench: Benchmark) -> dict[str, dict[str, float]] | None:
    """The qrels `query_folds` keeps queries together by (`spec.cv_groups`), or None: each query alone."""
    return bench.qrels if spec.cv_groups == "shared_documents" else None


def nested_scores(per_trial: list[dict[str, float]], folds: list[list[str]]) -> dict[str, float]:
    """Per query, the figure a searched retriever is selected by (module docstring): each fold's queries scored at
    the trial point with the best mean over the other folds' queries (ties: the earliest, as the search's own
    choice). `per_trial`: per point, the metric per query; queries outside every fold are left out."""
    out: dict[str, float] = {}
    for _, held in held_folds(folds, per_trial):
        i = best_without(per_trial, set(held))
        out.update({q: per_trial[i].get(q, 0.0) for q in held})
    return out


def repeated_folds(spec: TuningSpec, bench: Benchmark) -> list[list[list[str]]]:
    """The train queries' CV folds, drawn `spec.cv_repeats` times (fold seeds `spec.seed`, `spec.seed` + 1, ...): the
    learned model's folds (passed to `cross_validate` and its fold models) and every nested figure's."""
    judged = [q for q in bench.query_ids() if q in bench.qrels]
    return [query_folds(judged, spec.cv_folds, seed, fold_groups(spec, bench)) for seed in spec.fold_seeds()]


def mean_per_query(figures: list[dict[str, float]]) -> dict[str, float]:
    """Per query, the mean of its figure over `figures` (one per fold split) that hold it, in first-seen order; a
    figure equal on every split is kept as it is (a floating-point mean of equal values can move its last bit, and
    ties between trial points must stay ties)."""
    out: dict[str, list[float]] = {}
    for figure in figures:
        for q, v in figure.items():
            out.setdefault(q, []).append(v)
    return {q: float(v[0]) if all(x == v[0] for x in v) else float(np.mean(v)) for q, v in out.items()}


def held_folds(folds: list[list[str]], per_trial: list[dict[str, float]]) -> Iterator[tuple[int, list[str]]]:
    """(fold number, its queries that `per_trial` scored) for each fold holding any of them."""
    scored = set().union(*per_trial) if per_trial else set()
    for f, fold in enumerate(folds):
        held = [q for q in fold if q in scored]
        if held:
            yield f, held


def best_without(per_trial: list[dict[str, float]], held: set[str]) -> int:
    """The trial point with the best mean over the queries outside `held` (ties: the earliest)."""
    means = [np.mean([v for q, v in pq.items() if q not in held]) if any(q not in held for q in pq) else 0.0
             for pq in per_trial]
    return max(range(len(per_trial)), key=lambda i: (means[i], -i))


def ingredients(params: dict[str, Any]) -> list[str]:
    """The retrievers a retriever's params build on: fusion's `members`, pairwise's and query_likelihood's `base`,
    and the causal retriever's `shortlist` (it re-ranks that retriever's top candidates by the LLM's measures)."""
    shortlist = params.get("shortlist")
    return [*(params.get("members") or {}), *(params.get("base") or {}),
            *([shortlist] if isinstance(shortlist, str) else [])]


def paired_margin(a: dict[str, float], b: dict[str, float]) -> tuple[float, float, int]:
    """(mean of a - b, one standard error of that mean, queries) over the queries both were scored on."""
    on = sorted(set(a) & set(b))
    d = np.array([a[q] - b[q] for q in on])
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("inf")
    return (float(d.mean()) if len(d) else float("nan")), se, len(on)


def compare_nested(best: dict[str, dict[str, Any]], nested: dict[str, dict[str, float]], splits: int = 1,
                   robust_default: str | None = None) -> str:
    """Sets each retriever's `selection_value` (the mean of its nested scores over the queries it was scored on),
    `selectable` (a combination only where it beats every retriever it is built on, recursively, by more than one
    standard error of the paired difference on their common queries; `selection_margin` says by how much, or which
    one it did not beat) and marks the `selected` one (`choose`).

    `robust_default` (`TuningSpec.robust_default`): the winner must also beat it by more than one standard error
    of their paired difference, else the default is selected. A few train questions (a user's file of 10-50) do not
    separate the candidates, and the winner by a hair was the noise's choice (docs: the robust default's
    measurement). Returns one line saying how far the selection can be trusted."""
    scored = set().union(*(set(v) for v in nested.values())) if nested else set()
    for name, scores in nested.items():
        best[name]["selection_value"] = float(np.mean(list(scores.values()))) if scores else float("nan")
        best[name]["selection_evaluation"] = f"nested cv over {best[name]['trials']} points, on {len(scores)} " \
            f"train queries" + (" (a sample)" if len(scores) < len(scored) else "") + \
            (f", the mean over {splits} fold splits" if splits > 1 else "")

    def built_on(name: str) -> list[str]:
        out: list[str] = []
        for m in ingredients(best[name].get("params") or {}):
            if m in best and m not in out:
                out += [m, *(x for x in built_on(m) if x not in out and x != m)]
        return out

    for name in nested:
        margins = []
        for m in built_on(name):
            if m not in nested:
                continue
            on = sorted(set(nested[name]) & set(nested[m]))
            d = np.array([nested[name][q] - nested[m][q] for q in on])
            se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("inf")
            margins.append((m, float(d.mean()) if len(d) else float("nan"), se))
        lost = [(m, diff, se) for m, diff, se in margins if not diff > se]
        best[name]["selectable"] = not lost
        if margins:
            best[name]["selection_margin"] = "; ".join(
                f"{'+' if diff >= 0 else ''}{diff:.4f} over {m} (1 SE {se:.4f})" for m, diff, se in margins) + \
                (f": not beyond the noise of {', '.join(m for m, _, _ in lost)}" if lost else "")
    chosen = choose({n: v for n, v in nested.items() if best[n]["selectable"]})
    note = ""
    if chosen is not None and robust_default is not None:
        chosen, note = _against_default(best, nested, chosen, robust_default)
    for name in best:
        best[name].pop("selected", None)
    if chosen is not None:
        best[chosen]["selected"] = True
    return note


def _against_default(best: dict[str, dict[str, Any]], nested: dict[str, dict[str, float]], chosen: str,
                     default: str) -> tuple[str, str]:
    """(the retriever to select, why): `chosen` if it beats `default` beyond one standard error, else `default`."""
    if default not in nested or not best[default].get("selectable", True):
        return chosen, (f"`{chosen}` selected by its nested train figure (the robust default `{default}` was not "
                        f"tuned here, so nothing checks that the margin is more than noise)")
    if chosen != default:
        diff, se, n = paired_margin(nested[chosen], nested[default])
        if diff > se:
            return chosen, (f"`{chosen}` selected: {diff:+.4f} over the robust default `{default}` on {n} train "
                            f"queries (1 SE {se:.4f}), beyond the noise")
        return default, (f"`{default}` selected, the robust default: the best nested train figure, `{chosen}`'s, "
                         f"is {diff:+.4f} over it on {n} train queries (1 SE {se:.4f}), within the noise, so the "
                         f"train questions do not tell the two apart")
    others = [m for m in nested if m != default and best[m].get("selectable", True)]
    if not others:
        return chosen, f"`{chosen}` selected, the only retriever tuned"
    margins = {m: paired_margin(nested[default], nested[m]) for m in others}
    runner = min(margins, key=lambda m: margins[m][0])
    diff, se, n = margins[runner]
    return chosen, (f"`{chosen}` selected, the robust default, {diff:+.4f} over the next best `{runner}` on {n} "
                    f"train queries (1 SE {se:.4f}): " + ("beyond the noise" if diff > se else
                                                          "within the noise (they tie on these questions)"))


def choose(nested: dict[str, dict[str, float]]) -> str | None:
    """The retriever to select by nested figures, each comparison on the queries both were scored on: the best of
    those scored on every query (ties: the earlier in `TUNABLE`), unless a retriever scored on a sample (the causal
    one: its answer model runs per candidate) beats every one of them on its sample. Comparing all of them on the
    sample alone, as before, threw away the other queries (HotpotQA: 60 of 91) for every other choice."""
    if not nested:
        return None
    scored = set().union(*(set(v) for v in nested.values()))

    def mean(name: str, on: set[str]) -> float:
        return float(np.mean([nested[name][q] for q in on])) if on else float("-inf")

    complete = [n for n, v in nested.items() if set(v) == scored]
    sampled = [n for n in nested if n not in complete]
    winner = max(complete, key=lambda n: (mean(n, scored), -ORDER[n])) if complete else None
    challengers = [s for s in sampled
                   if all(mean(s, set(nested[s])) > mean(c, set(nested[s])) for c in complete)]
    if challengers:
        # (without a complete one, the sampled ones compared on the queries they share)
        on = set.intersection(*(set(nested[s]) for s in challengers))
        winner = max(challengers, key=lambda n: (mean(n, on), -ORDER[n]))
    return winner


def coordinate_search(space: dict[str, list[Any]], start: dict[str, Any], score: Callable[[dict[str, Any]], float],
                      passes: int) -> list[tuple[dict[str, Any], float]]:
    """Coordinate ascent over `space` from `start` (module docstring). Returns every scored point, in order."""
    scored: dict[str, float] = {}
    order: list[tuple[dict[str, Any], float]] = []

    def value(point: dict[str, Any]) -> float:
        k = _key(point)
        if k not in scored:
            scored[k] = score(point)
            order.append((dict(point), scored[k]))
        return scored[k]

    current = {**{k: v[0] for k, v in space.items()}, **{k: v for k, v in start.items() if k in space}}
    best = value(current)
    for _ in range(passes):
        improved = False
        for key, values in space.items():
            for v in values:
                cand = {**current, key: v}
                s = value(cand)
                if s > best + 1e-9:
                    best, current, improved = s, cand, True
        if not improved:
            break
    return order


def tune(index: CorpusIndex, bench: Benchmark, spec: TuningSpec, listed: dict[str, dict[str, Any]],
         neighbors=None, graph=None, mc_labels: pd.DataFrame | None = None, forbidden: tuple[str, ...] = (),
         log: Callable[[str], None] = lambda m: None,
         extra_sources: Callable[[str], tuple | None] | None = None,
         scorer: Callable[[], Any] | None = None) -> TuningResult:
    """Search every retriever of `spec.resolved_retrievers(listed)` on `bench` (module docstring).

    `listed`: the benchmark's evaluation retrievers and their fixed params (kept under the tuned ones, e.g.
    entity_first's budget `k`). `mc_labels`: Monte Carlo labels; only rows of `bench`'s questions are used.
    `forbidden`: split names that must never be tuned on (the eval splits). `extra_sources(name)`: (index, tune-split
    Benchmark, graph) of another benchmark named in `spec.learned_extra`, or None when it is not available.
    `scorer()`: the LLM's log-probability scorer; the causal retriever is then tuned with `answer_model: likelihood`
    unless its params name another (`causal_answer_model`), and without one with the lexical fallback. Its
    measurements go through the call cache, so every trial after the first re-reads them."""
    if bench.split in forbidden:
        raise ValueError(f"refusing to tune on split {bench.split!r}: it is an evaluation split")
    metric, k = parse_metric(spec.metric)
    names = spec.resolved_retrievers(list(listed), bench.within is not None)
    rows: list[dict[str, Any]] = []
    best: dict[str, dict[str, Any]] = {}
    models: dict[str, Any] = {}
    out_of_fold: dict[str, list[Any]] = {}   # "learned" -> its out-of-fold retriever per fold split
    scored_queries: set[str] = set()
    nested_of: dict[str, dict[str, float]] = {}   # retriever -> nested score per train query
    runs: dict[str, dict[str, float]] = {}   # (retriever, params) key -> metric per query: a point is run once
    # the learned model's CV folds (`cross_validate`), once per fold split, for every retriever's nested figure
    splits = repeated_folds(spec, bench)
    choices = [FoldChoices(folds) for folds in splits]   # per split: each retriever's choice without each fold

    def record(name: str, points: list[tuple[dict[str, Any], float]], evaluation: str, queries: int,
               seconds: list[float], fixed: dict[str, Any], per_query: list[dict[str, float]],
               by_split: list[list[dict[str, float]]] | None = None) -> dict[str, Any]:
        """`per_query`: per point, the metric per query (a combination's: the mean over the fold splits, whose own
        figures `by_split` gives per split and point; None: the same figures on every split)."""
        i_best = max(range(len(points)), key=lambda i: (points[i][1], -i))  # ties: the earliest (defaults first)
        for i, ((point, value), sec) in enumerate(zip(points, seconds)):
            rows.append({"retriever": name, "trial": i, "params": _key({**fixed, **nested(point)}),
                         "metric": spec.metric, "value": float(value), "evaluation": evaluation, "queries": queries,
                         "seconds": round(sec, 3), "best": i == i_best})
        point, value = points[i_best]
        by_split = by_split or [per_query] * len(splits)
        if name != "learned":   # the learned model's fold models already hold each fold out
            for chooser, figures in zip(choices, by_split):
                chooser.add(name, [{**fixed, **nested(p)} for p, _ in points], figures)
        nested_of[name] = mean_per_query([nested_scores(figures, folds) for figures, folds in zip(by_split, splits)])
        best[name] = {"params": {**fixed, **nested(point)}, "value": float(value), "evaluation": evaluation,
                      "queries": queries, "trials": len(points)}
        log(f"{name}: best {spec.metric} {value:.4f} ({evaluation}, {queries} queries, {len(points)} trials) "
            f"with {_key(best[name]['params'])}; nested {np.mean(list(nested_of[name].values())):.4f}")
        return best[name]

    built: dict[str, Any] = {}

    def _causal(params: dict[str, Any]):
        """One CausalRetriever per shortlist/answer model, its options set per trial: building one prepares
        the graph (~30 s on HotpotQA's entity graph) and keeps its path caches, which every trial reuses."""
        option_keys = {f.name for f in fields(CausalRetrievalOptions)}
        build = {k_: v for k_, v in params.items() if k_ not in option_keys}
        key = _key(build)
        if key not in built:
            needs_scorer = scorer is not None and uses_scorer("causal", build, True)
            built[key] = build_retriever("causal", index, build, neighbors, None, graph,
                                         scorer() if needs_scorer else None)
        built[key].options = CausalRetrievalOptions(**{k_: v for k_, v in params.items() if k_ in option_keys})
        return built[key]

    def run_point(name: str, params: dict[str, Any], sub: Benchmark, split: int = 0) -> dict[str, float]:
        """The metric per query of a combination (or plain retriever) at `params` on `sub`'s queries, with the
        learned member of fold split `split`, run once."""
        by_split = name in COMBINATIONS and '"@learned"' in _key(params)
        key = _key({"retriever": name, "params": params, "queries": sub.query_ids(), "split": split if by_split else 0})
        if key not in runs:
            # The learned member ranks each train query with the fold model that never saw it, so the train
            # figure of a combination is as out-of-sample as learned's own (cross-validated) one.
            built_params = _with_models(params, {n: r[split] for n, r in out_of_fold.items()}) \
                if name in COMBINATIONS else params
            retriever = build_retriever(name, index, built_params, neighbors, None, graph,
                                        scorer() if scorer is not None and uses_scorer(name, params, True) else None)
            rr = run_benchmark(retriever, sub, k, name)
            runs[key] = named_metric_per_query(sub.qrels, rr.run, spec.metric)
        return runs[key]

    def learned_shortlist(params: dict[str, Any]) -> dict[str, Any]:
        """Causal params whose learned shortlist is this run's: each train query shortlisted by the fold model that
        never saw it, as fusion/pairwise do (the model fitted on every train query ranks them nearly perfectly,
        which no weight may learn from). The first fold split's: the causal retriever is scored once per point
        (its answer model runs per candidate), and only its nested figure is averaged over the splits."""
        return {**params, "shortlist_params": {"retriever": out_of_fold["learned"][0]} if "learned" in out_of_fold
                else {"model": models["learned"]}}

    def two_search_nested(candidates: tuple[list[dict[str, Any]], list[dict[str, float]]],
                          sub: Benchmark, weighed: tuple[str, ...]) -> dict[str, float]:
        """The causal retriever's nested figure over both of its searches: each fold's queries scored with the
        candidate settings (the lexical search) and the weights (the LLM's) each chosen without that fold. Where the
        settings chosen without the fold are those chosen on every query, that is the second search's own nested
        figure; else the fold's queries are re-run with those settings (and the weights chosen without the fold,
        which were searched on the settings of every query). Without this the settings' choice on every query
        passed into the figure unpaid."""
        (first, first_scores), (second, second_scores) = candidates, choices[0].searched["causal"]
        everywhere = first[best_without(first_scores, set())]
        by_split = []
        for folds in splits:
            out = nested_scores(second_scores, folds)   # right for every fold whose settings do not move
            for _, held in held_folds(folds, second_scores):
                settings = first[best_without(first_scores, set(held))]
                if settings == everywhere:
                    continue
                j = best_without(second_scores, set(held))
                params = {**second[j], **{k_: v for k_, v in settings.items() if k_ not in weighed}}
                if params.get("shortlist") == "learned" and not _given_model(params):
                    params = learned_shortlist(params)
                part = restrict(sub, held)
                rr = run_benchmark(_causal(params), part, k, "causal", progress=log)
                out.update(named_metric_per_query(part.qrels, rr.run, spec.metric))
                log(f"causal: fold of {len(held)} queries re-run with the settings chosen without it")
            by_split.append(out)
        return mean_per_query(by_split)

    with cached_query_vectors(index):
        for name in names:
            t0 = time.perf_counter()
            space = spec.space(name, bench.within is not None)
            given = flat(listed.get(name, {}), space)
            fixed = nested({k_: v for k_, v in given.items() if k_ not in space})
            if name == "causal":
                # stored with the config, so the evaluation runs the answer model that was tuned
                fixed = {**fixed, "answer_model": causal_answer_model(fixed, scorer is not None)}
                log(f"causal: answer model {fixed['answer_model']}" + (
                    "" if fixed["answer_model"] != "lexical" or "answer_model" in given
                    else " (fallback: no log-probability scorer configured)"))
            if name == "hybrid":
                # With candidate sets, both BM25 statistics (corpus | candidates) are swept; ties keep corpus.
                stats = ("corpus", "candidates") if bench.within is not None else ("corpus",)
                sweep = pd.concat([sweep_fusion_weight(index, bench, metric=metric, k=k, within_stats=st)
                                   for st in stats], ignore_index=True)
                scored_queries |= set(bench.query_ids())
                per = (time.perf_counter() - t0) / max(len(sweep), 1)
                record(name, [({"weight": float(w), **({"within_stats": st} if bench.within is not None else {})},
                               float(v)) for w, v, st in zip(sweep["weight"], sweep["value"], sweep["within_stats"])],
                       "train", len(bench.query_ids()), [per] * len(sweep), fixed, list(sweep["per_query"]))
                continue
            if name == "learned":
                hybrid = best.get("hybrid", {}).get("params", {})
                ql = spec.learned_question_likelihood and scorer is not None
                if spec.learned_question_likelihood and not ql:
                    log("learned: no log-probability scorer configured: tuned without the question-likelihood "
                        "feature")
                model, points, secs, queries, oof, per_query = _tune_learned(
                    index, bench, spec, splits, graph, mc_labels, hybrid.get("weight", 0.7), log,
                    hybrid.get("within_stats", "corpus"), extra_sources, scorer() if ql else None)
                out_of_fold["learned"] = oof
                scored_queries |= set(bench.query_ids())
                chosen = record(name, points, f"cv{spec.cv_folds}" + (f" x {len(splits)} fold splits"
                                                                      if len(splits) > 1 else ""),
                                queries, secs, fixed, [mean_per_query(p) for p in zip(*per_query)], per_query)
                models[name] = model
                # The retriever's own params; target and hyperparameters live in the model (and the trials).
                chosen["chosen"] = chosen["params"]
                chosen["params"] = {**fixed, "depth": model.extractor_settings["depth"], "model_path": "@learned"}
                continue
            if name == "fusion":
                members = [m for m in spec.fusion_members if m in best]
                if len(members) < 2:
                    log(f"fusion: needs two tuned members of {spec.fusion_members}, has {members}: skipped")
                    continue
                fixed = {**fixed, "members": {m: best[m]["params"] for m in members}}
                space = {k_: v for k_, v in space.items()
                         if not k_.startswith("weights.") or k_.split(".", 1)[1] in members}
            if name in ("pairwise", "query_likelihood"):
                bases = spec.pairwise_base if name == "pairwise" else spec.query_likelihood_base
                base = next((b for b in bases if b in best), None)
                if base is None:
                    log(f"{name}: none of {bases} was tuned: skipped")
                    continue
                if name == "query_likelihood" and scorer is None:
                    log("query_likelihood: no log-probability scorer configured: skipped")
                    continue
                fixed = {**fixed, "base": {base: best[base]["params"]}}
            sub = sample_queries(bench, spec.max_queries.get(name), spec.seed)
            scored_queries |= set(sub.query_ids())

            def search(space: dict[str, list[Any]], fixed: dict[str, Any], start: dict[str, Any], note: str = "",
                       name=name, sub=sub) -> dict[str, Any]:
                seconds: list[float] = []
                per_query: list[dict[str, float] | None] = []
                by_split: list[list[dict[str, float]] | None] = []   # per point, the figures of each fold split

                def score(point: dict[str, Any]) -> float:
                    t = time.perf_counter()
                    params = {**fixed, **nested(point)}
                    if name == "causal" and params.get("shortlist") == "learned" and not _given_model(params):
                        if "learned" not in models:
                            seconds.append(time.perf_counter() - t)
                            per_query.append(None)
                            by_split.append(None)
                            return float("-inf")   # no model trained in this run: the point is not available
                        params = learned_shortlist(params)
                    if name == "causal":
                        # the causal retriever asks its answer model per candidate: trials report progress and figure
                        rr = run_benchmark(_causal(params), sub, k, name, progress=log)
                        by_split.append([named_metric_per_query(sub.qrels, rr.run, spec.metric)] * len(splits))
                    else:
                        # a combination with a learned member: its train figure is the mean over the fold splits'
                        # out-of-fold learned rankings (one run otherwise: the same figure on every split)
                        by_split.append([run_point(name, params, sub, r) for r in range(len(splits))])
                    per_query.append(mean_per_query(by_split[-1]))
                    value = float(np.mean(list(per_query[-1].values()))) if per_query[-1] else float("nan")
                    seconds.append(time.perf_counter() - t)
                    if name == "causal":
                        log(f"causal trial {len(seconds)}: {spec.metric} {value:.4f} in {seconds[-1]:.0f}s")
                    return value

                points = coordinate_search(space, start, score, spec.passes)
                keep = [i for i, (_, v) in enumerate(points) if np.isfinite(v)]   # drop unavailable points
                points, seconds[:] = [points[i] for i in keep], [seconds[i] for i in keep]
                per_query[:] = [per_query[i] for i in keep]
                by_split[:] = [by_split[i] for i in keep]
                evaluation = ("train" if sub is bench else f"train sample of {len(sub.query_ids())}") + \
                    (f", {note}" if note else "")
                chosen = record(name, points, evaluation, len(sub.query_ids()), seconds, fixed, per_query,
                                [list(figures) for figures in zip(*by_split)] if by_split else None)
                if name in COMBINATIONS:
                    nested_of[name] = mean_per_query([
                        chooser.nested(name, lambda params, r=r: run_point(name, params, sub, r))
                        for r, chooser in enumerate(choices)])
                    log(f"{name}: nested {np.mean(list(nested_of[name].values())):.4f} with its ingredients' "
                        f"choice nested too")
                return chosen

            start = {**KINDS[name].start, **{k_: v for k_, v in given.items() if k_ in space}}
            note, candidates = "", None
            if name == "causal" and fixed["answer_model"] == "likelihood":
                # Every candidate setting (shortlist, sizes, graph, hops) costs its own LLM measurements, so the
                # candidates are chosen first with the offline lexical model over the whole space; the LLM's
                # measures are then weighed on those candidates (weights and min_relevance only), the diversity
                # filter off: a ranking keeps every candidate, and the filter's context sets double the prompts.
                llm_params = {k_: v for k_, v in fixed.items() if k_ == "answer_model_params"}
                lexical = {**{k_: v for k_, v in fixed.items() if k_ not in llm_params}, "answer_model": "lexical"}
                first = search(space, lexical, start, "candidates, lexical model")
                candidates = choices[0].searched["causal"]
                weighed = ("weights", "min_relevance")
                chose = flat(first["params"], space)
                fixed = {**nested({k_: v for k_, v in chose.items() if k_ not in weighed}), **llm_params,
                         "answer_model": "likelihood", "diversity_threshold": 0.0}
                space = {k_: v for k_, v in space.items() if k_ in weighed}
                start = {k_: chose[k_] for k_ in weighed if k_ in chose}
                note = "answer likelihood on those candidates"
            chosen = search(space, fixed, start, note)
            if candidates is not None:
                # the second search's keys and what it sets itself (the LLM's model, the filter off)
                nested_of[name] = two_search_nested(candidates, sub, (*weighed, "answer_model", "answer_model_params",
                                                                      "diversity_threshold"))
                log(f"causal: nested {np.mean(list(nested_of[name].values())):.4f} over both searches")
            if name == "causal" and chosen["params"].get("shortlist") == "learned" and not _given_model(fixed):
                chosen["params"]["shortlist_params"] = {"model_path": "@learned"}   # resolved by the store
    note = compare_nested(best, nested_of, len(splits), spec.robust_default)
    if note:
        log(f"selection: {note}")
    if best:
        log("selection (nested; a sample's figure on its sample): " + ", ".join(
            f"{n} {b['selection_value']:.4f}" + ("" if b.get("selectable", True) else " (not selectable)")
            for n, b in sorted(best.items(), key=lambda x: -x[1]["selection_value"])) +
            f"; selected: {next((n for n, b in best.items() if b.get('selected')), None)}")
        for n, b in best.items():
            if "selection_margin" in b:
                log(f"{n}: {b['selection_margin']}")
    trials = pd.DataFrame(rows, columns=TRIAL_COLUMNS)
    return TuningResult(trials, best, models, sorted(scored_queries), note, nested_of)


class FoldChoices:
    """Per fold of the train queries, the point each searched retriever would have chosen without that fold's
    queries, for nested figures of combinations that nest their ingredients' choice too (module docstring)."""

    def __init__(self, folds: list[list[str]]):
        self.folds = folds
        # retriever, or (combination, fold) -> (params of every scored point, the metric per query of each)
        self.searched: dict[Any, tuple[list[dict[str, Any]], list[dict[str, float]]]] = {}

    def add(self, name: str, params: list[dict[str, Any]], per_query: list[dict[str, float]]) -> None:
        self.searched[name] = (params, per_query)

    def chosen_without(self, name: str, f: int) -> dict[str, Any]:
        """`name`'s params at the point with the best mean over the queries of the other folds (a combination's
        among its points with its ingredients at their own fold-f choices)."""
        params, per_query = self.searched.get((name, f), self.searched[name])
        return params[best_without(per_query, set(self.folds[f]))]

    def at_fold(self, params: dict[str, Any], f: int) -> dict[str, Any]:
        """A combination's params with each searched ingredient (fusion's members, a base) at its fold-f choice;
        an ingredient not searched here (the learned model: its fold models hold each fold out) is kept."""
        out = dict(params)
        for key in ("members", "base"):
            if isinstance(out.get(key), dict):
                out[key] = {m: self.chosen_without(m, f) if m in self.searched else p for m, p in out[key].items()}
        return out

    def nested(self, name: str, run: Callable[[dict[str, Any]], dict[str, float]]) -> dict[str, float]:
        """A combination's nested figure with its ingredients' choice nested too: each fold's queries scored at
        the combination's point chosen on the other folds, every ingredient at its own choice without that fold
        (`run(params)`: the metric per query; points whose ingredients do not move are not re-run). Without this
        a combination inherits the train optimism of ingredients chosen on every train query: on HotpotQA,
        pairwise at its zero weights (= fusion at its best train point) scored 0.9290 "nested" where fusion's own
        nested figure was 0.9218, and was selected over it by the one-SE rule."""
        params, per_query = self.searched[name]
        out: dict[str, float] = {}
        for f, held in held_folds(self.folds, per_query):
            moved = [self.at_fold(p, f) for p in params]
            scores = [pq if m == p else run(m) for p, m, pq in zip(params, moved, per_query)]
            self.searched[(name, f)] = (moved, scores)
            i = best_without(scores, set(held))
            out.update({q: scores[i].get(q, 0.0) for q in held})
        return out


def _with_models(params: Any, retrievers: dict[str, Any]) -> Any:
    """`params` with every `{"model_path": "@learned"}` given the retriever built in this run instead."""
    if not isinstance(params, dict):
        return params
    out = {k: _with_models(v, retrievers) for k, v in params.items()}
    if out.get("model_path") == "@learned" and "learned" in retrievers:
        out.pop("model_path")
        out["retriever"] = retrievers["learned"]
    return out


class OutOfFoldLearned:
    """The learned retriever over the tune split's own queries, each ranked by the model of the CV fold that
    held it out (a query not in any fold - not a train query - by the first fold's model)."""

    name = "learned"

    def __init__(self, retrievers: list[Any], fold_of_text: dict[str, int]):
        self.retrievers, self.fold_of_text = retrievers, fold_of_text
        # every trial of a combination re-ranks the same train queries, and its nested figure re-runs points whose
        # other ingredients moved (SciFact's fusion: 14 points x 5 folds over 200 claims): each ranking is made once
        self._ranked: dict[tuple, list] = {}

    def retrieve_many(self, queries: list[str], k: int, within: list[list[str]] | None = None):
        out = []
        for i, q in enumerate(queries):
            key = (q, k, tuple(within[i]) if within else None)
            if key not in self._ranked:
                self._ranked[key] = self.retrievers[self.fold_of_text.get(q, 0)].retrieve_many(
                    [q], k, [within[i]] if within else None)[0]
            out.append(list(self._ranked[key]))
        return out


def labels_of(bench: Benchmark, mc_labels: pd.DataFrame | None) -> pd.DataFrame | None:
    """The Monte Carlo labels of `bench`'s own questions: labels are computed on a split (HotpotQA: `dev`) that
    also holds held-out questions, and those must not reach the tuner."""
    if mc_labels is None or not len(mc_labels):
        return None
    return mc_labels[mc_labels["question_id"].isin(set(bench.query_ids()))]


def _tune_learned(index: CorpusIndex, bench: Benchmark, spec: TuningSpec, splits: list[list[list[str]]], graph,
                  mc_labels, weight: float, log: Callable[[str], None], within_stats: str = "corpus",
                  extra_sources=None, scorer=None):
    """Grouped-CV choice of target and hyperparameters (and, with `scorer`, whether the question-likelihood feature
    is used: every point with and without it), then the refit model. `splits`: the train queries' fold splits
    (`repeated_folds`), shared with every other retriever's nested figure; a point's cv value is the mean over them.
    Returns (model, [(point, cv value)], seconds per trial, queries, per fold split the out-of-fold learned retriever,
    per fold split and point the cv metric per query)."""
    t0 = time.perf_counter()
    likelihood = scorer is not None
    extractor = FeatureExtractor(index, graph, weight=weight, within_stats=within_stats,
                                 question_likelihood=likelihood, scorer=scorer)
    qids = bench.query_ids()
    table = candidate_table(extractor, {q: bench.queries[q] for q in qids},
                            index.embedder.encode_queries([bench.queries[q] for q in qids]), bench.within)
    log(f"learned: {len(table)} candidate rows for {len(qids)} train queries in {time.perf_counter() - t0:.1f}s "
        f"(first stage: hybrid, weight {weight}, BM25 statistics {within_stats})")
    extra_qrels: dict[str, dict[str, float]] = {}
    extra_counts: dict[str, int] = {}
    for other in spec.learned_extra:
        source = extra_sources(other) if extra_sources is not None and other != bench.name else None
        if source is None:
            log(f"learned: extra training benchmark {other!r} not available: left out")
            continue
        x_index, x_bench, x_graph = source
        x_ids = x_bench.query_ids()
        key = {q: f"{other}:{q}" for q in x_ids}   # query ids of another benchmark, kept apart from ours
        x_table = candidate_table(FeatureExtractor(x_index, x_graph, weight=weight, within_stats=within_stats,
                                                   question_likelihood=likelihood, scorer=scorer),
                                  {key[q]: x_bench.queries[q] for q in x_ids},
                                  x_index.embedder.encode_queries([x_bench.queries[q] for q in x_ids]),
                                  {key[q]: x_bench.within[q] for q in x_ids} if x_bench.within else None)
        table = pd.concat([table, x_table], ignore_index=True)
        extra_qrels.update({key[q]: x_bench.qrels[q] for q in x_ids})
        extra_counts[f"{other}/{x_bench.split}"] = len(x_ids)
        log(f"learned: + {len(x_ids)} questions of {other}/{x_bench.split} in every training fold")
    labels = labels_of(bench, mc_labels)
    targets = [t for t in spec.learned_targets
               if t == "qrels" or (t == "delta_p" and labels is not None
                                   and labels["question_id"].nunique() >= spec.min_mc_questions)]
    if likelihood:
        log(f"learned: question likelihood scored with the other features of {len(table)} candidate rows "
            f"({time.perf_counter() - t0:.1f}s in all)")
    points, secs, tables, per_query = [], [], {}, [[] for _ in splits]
    # without the feature first: a CV that cannot tell the two apart (ties keep the earlier point) scores no LLM
    # call at query time
    for target in targets:
        rows = attach_target(table, target, {**bench.qrels, **extra_qrels}, labels)
        for with_likelihood in ((False, True) if likelihood else (False,)):
            tables[target, with_likelihood] = rows if with_likelihood else rows.drop(columns=list(QUESTION_LIKELIHOOD),
                                                                                     errors="ignore")
            for params in grid_for(target):
                t = time.perf_counter()
                values = []
                for r, folds in enumerate(splits):
                    value, _, scores = cross_validate(tables[target, with_likelihood], target, params, bench.qrels,
                                                      spec.metric, folds)
                    values.append(value)
                    per_query[r].append(scores)
                value = float(np.mean(values))
                points.append(({"target": target, "hyperparameters": dict(params),
                                **({"question_likelihood": with_likelihood} if likelihood else {})}, value))
                secs.append(time.perf_counter() - t)
                log(f"learned: target {target} {params}"
                    f"{' with question likelihood' if with_likelihood else ''}: cv {spec.metric} {value:.4f}")
    point, _ = max(points, key=lambda p: p[1])
    chosen = tables[point["target"], bool(point.get("question_likelihood"))]
    settings = {**extractor.settings(), "question_likelihood": bool(point.get("question_likelihood"))}
    model = fit_model(chosen, point["target"], point["hyperparameters"], settings,
                      {"benchmark": bench.name, "split": bench.split, "metric": spec.metric,
                       "extra_train": extra_counts})
    model_scorer = scorer if settings["question_likelihood"] else None
    # The chosen point's fold models (on the folds `cross_validate` used), for out-of-fold figures of combinations.
    out_of_fold = []
    for folds in splits:
        fold_models, fold_of_text = [], {}
        for f, fold in enumerate(folds):
            held = chosen["query_id"].isin(fold).to_numpy()
            fold_models.append(LearnedRetriever(index, fit_model(chosen[~held], point["target"],
                                                                 point["hyperparameters"], settings),
                                                graph, scorer=model_scorer))
            fold_of_text.update({bench.queries[q]: f for q in fold})
        out_of_fold.append(OutOfFoldLearned(fold_models, fold_of_text))
    return model, points, secs, len(qids), out_of_fold, per_query
