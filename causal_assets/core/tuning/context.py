"""One tuning run's inputs and what its strategies have found so far: the trial rows, each retriever's best point
and nested figure, the fitted model, and the runs already made (a point is scored once). The strategies
(`core/tuning/strategies`) search through it in the order `tune` calls them."""
from __future__ import annotations

import time
from dataclasses import fields
from typing import Any, Callable

import numpy as np
import pandas as pd

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.measures.metrics import named_metric_per_query, parse_metric
from causal_assets.core.evaluation.runner import run_benchmark
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.causal.results import CausalRetrievalOptions
from causal_assets.core.retrievers.factory import build_retriever, uses_scorer
from causal_assets.core.registry.retrievers import KINDS
from causal_assets.core.tuning.points import coordinate_search, flat, nested, point_key, sample_queries
from causal_assets.core.tuning.selection import FoldChoices, mean_per_query, nested_scores, repeated_folds
from causal_assets.core.registry.tuning import TuningSpec

# Per point, the metric per query on each fold split (the same figure on every split unless a learned member ranks
# with that split's out-of-fold models), or None: the point is not available in this run.
Measure = Callable[[dict[str, Any]], "list[dict[str, float]] | None"]


def given_model(params: dict[str, Any]) -> bool:
    """A learned shortlist's model handed in by the caller (a stored model's file), not one this run trains."""
    given = params.get("shortlist_params") or {}
    return given.get("model") is not None or not str(given.get("model_path") or "@").startswith("@")


def trained_here(name: Any) -> bool:
    """Whether `name` is a kind whose model the tuning run fits (its model is then this run's, `@learned`)."""
    return isinstance(name, str) and name in KINDS and KINDS[name].tuning == "fit"


def with_models(params: Any, learned: Any) -> Any:
    """`params` with every `{"model_path": "@learned"}` given the retriever `learned` built in this run instead."""
    if not isinstance(params, dict):
        return params
    out = {k: with_models(v, learned) for k, v in params.items()}
    if out.get("model_path") == "@learned" and learned is not None:
        out.pop("model_path")
        out["retriever"] = learned
    return out


class TuningContext:
    """The state one `tune` call shares between its strategies (arguments: `search.tune`)."""

    def __init__(self, index: CorpusIndex, bench: Benchmark, spec: TuningSpec, listed: dict[str, dict[str, Any]],
                 neighbors, graph, mc_labels: pd.DataFrame | None, log: Callable[[str], None],
                 extra_sources: Callable[[str], tuple | None] | None, scorer: Callable[[], Any] | None):
        self.index, self.bench, self.spec, self.listed = index, bench, spec, listed
        self.neighbors, self.graph, self.mc_labels, self.log = neighbors, graph, mc_labels, log
        self.extra_sources, self.scorer = extra_sources, scorer
        self.metric, self.k = parse_metric(spec.metric)
        self.names = spec.resolved_retrievers(list(listed), bench.within is not None)
        self.rows: list[dict[str, Any]] = []
        self.best: dict[str, dict[str, Any]] = {}
        self.models: dict[str, Any] = {}
        self.trained_model: Any = None         # the model fitted in this run (the learned kind's)
        self.out_of_fold: list[Any] | None = None   # its out-of-fold retriever per fold split
        self.scored_queries: set[str] = set()
        self.nested_of: dict[str, dict[str, float]] = {}   # retriever -> nested score per train query
        self._runs: dict[str, dict[str, float]] = {}   # (retriever, params, queries) key -> metric per query
        self._ranked: dict[str, dict[str, dict[str, float]]] = {}   # the same key and depth -> its run
        self._built: dict[str, Any] = {}
        # the learned model's CV folds (`cross_validate`), once per fold split, for every retriever's nested figure
        self.splits = repeated_folds(spec, bench)
        self.choices = [FoldChoices(folds) for folds in self.splits]   # per split: each one's choice without a fold

    def start(self, name: str) -> tuple[dict[str, list[Any]], dict[str, Any], dict[str, Any]]:
        """(search space, the listed params flattened to it, the listed params kept fixed under the searched)."""
        space = self.spec.space(name, self.bench.within is not None)
        given = flat(self.listed.get(name, {}), space)
        return space, given, nested({k: v for k, v in given.items() if k not in space})

    def sample(self, name: str) -> Benchmark:
        """The train queries `name` is scored on (`spec.max_queries`), counted as scored."""
        sub = sample_queries(self.bench, self.spec.max_queries.get(name), self.spec.seed)
        self.scored_queries |= set(sub.query_ids())
        return sub

    def record(self, name: str, points: list[tuple[dict[str, Any], float]], evaluation: str, queries: int,
               seconds: list[float], fixed: dict[str, Any], per_query: list[dict[str, float]],
               by_split: list[list[dict[str, float]]] | None = None, fold_choices: bool = True) -> dict[str, Any]:
        """Rows, best point and nested figure of a search. `per_query`: per point, the metric per query (a
        combination's: the mean over the fold splits, whose own figures `by_split` gives per split and point; None:
        the same figures on every split). `fold_choices`: kept for combinations' nested figures (a fitted model's
        fold models already hold each fold out)."""
        i_best = max(range(len(points)), key=lambda i: (points[i][1], -i))  # ties: the earliest (defaults first)
        for i, ((point, value), sec) in enumerate(zip(points, seconds)):
            self.rows.append({"retriever": name, "trial": i, "params": point_key({**fixed, **nested(point)}),
                              "metric": self.spec.metric, "value": float(value), "evaluation": evaluation,
                              "queries": queries, "seconds": round(sec, 3), "best": i == i_best})
        point, value = points[i_best]
        by_split = by_split or [per_query] * len(self.splits)
        if fold_choices:
            for chooser, figures in zip(self.choices, by_split):
                chooser.add(name, [{**fixed, **nested(p)} for p, _ in points], figures)
        self.nested_of[name] = mean_per_query([nested_scores(figures, folds)
                                               for figures, folds in zip(by_split, self.splits)])
        self.best[name] = {"params": {**fixed, **nested(point)}, "value": float(value), "evaluation": evaluation,
                           "queries": queries, "trials": len(points)}
        self.log(f"{name}: best {self.spec.metric} {value:.4f} ({evaluation}, {queries} queries, {len(points)} "
                 f"trials) with {point_key(self.best[name]['params'])}; nested "
                 f"{np.mean(list(self.nested_of[name].values())):.4f}")
        return self.best[name]

    def search(self, name: str, sub: Benchmark, space: dict[str, list[Any]], fixed: dict[str, Any],
               start: dict[str, Any], measure: Measure, note: str = "") -> dict[str, Any]:
        """Coordinate ascent of `name` over `space` on `sub`'s queries, each point measured by `measure`; the
        unavailable points are dropped, the rest recorded."""
        seconds: list[float] = []
        per_query: list[dict[str, float] | None] = []
        by_split: list[list[dict[str, float]] | None] = []   # per point, the figures of each fold split

        def score(point: dict[str, Any]) -> float:
            t = time.perf_counter()
            by_split.append(measure({**fixed, **nested(point)}))
            if by_split[-1] is None:
                seconds.append(time.perf_counter() - t)
                per_query.append(None)
                return float("-inf")
            per_query.append(mean_per_query(by_split[-1]))
            value = float(np.mean(list(per_query[-1].values()))) if per_query[-1] else float("nan")
            seconds.append(time.perf_counter() - t)
            if KINDS[name].progress:
                self.log(f"{name} trial {len(seconds)}: {self.spec.metric} {value:.4f} in {seconds[-1]:.0f}s")
            return value

        points = coordinate_search(space, start, score, self.spec.passes)
        keep = [i for i, (_, v) in enumerate(points) if np.isfinite(v)]   # drop unavailable points
        points, seconds = [points[i] for i in keep], [seconds[i] for i in keep]
        per_query, by_split = [per_query[i] for i in keep], [by_split[i] for i in keep]
        evaluation = ("train" if sub is self.bench else f"train sample of {len(sub.query_ids())}") + \
            (f", {note}" if note else "")
        return self.record(name, points, evaluation, len(sub.query_ids()), seconds, fixed, per_query,
                           [list(figures) for figures in zip(*by_split)] if by_split else None)

    def scorer_for(self, name: str, params: dict[str, Any]):
        return self.scorer() if self.scorer is not None and uses_scorer(name, params, True) else None

    def run_point(self, name: str, params: dict[str, Any], sub: Benchmark, split: int = 0) -> dict[str, float]:
        """The metric per query of `name` at `params` on `sub`'s queries, with the learned member of fold split
        `split`, run once."""
        key = self._key(name, params, sub, split)
        if key not in self._runs:
            self._runs[key] = named_metric_per_query(sub.qrels, self.ranked(name, params, sub, split),
                                                     self.spec.metric)
        return self._runs[key]

    def ranked(self, name: str, params: dict[str, Any], sub: Benchmark, split: int = 0,
               depth: int | None = None) -> dict[str, dict[str, float]]:
        """The run ({query: {doc: score}}) of `name` at `params` on `sub`'s queries to `depth` (default: the
        metric's k), out of sample: the learned kind ranks each query with the fold model of split `split` that never
        saw it, and so does a combination's learned member. Run once per point and depth."""
        depth = depth or self.k
        key = self._key(name, params, sub, split) + f"@{depth}"
        if key not in self._ranked:
            if trained_here(name) and self.out_of_fold is not None and not given_model(params):
                retriever = self.out_of_fold[split]
            else:
                built_params = with_models(params, self.out_of_fold[split] if self.out_of_fold is not None
                                           else None) if KINDS[name].combination else params
                retriever = build_retriever(name, self.index, built_params, self.neighbors, None, self.graph,
                                            self.scorer_for(name, params))
            self._ranked[key] = run_benchmark(retriever, sub, depth, name).run
        return self._ranked[key]

    def _key(self, name: str, params: dict[str, Any], sub: Benchmark, split: int) -> str:
        by_split = (KINDS[name].combination and '"@learned"' in point_key(params)) or trained_here(name)
        return point_key({"retriever": name, "params": params, "queries": sub.query_ids(),
                          "split": split if by_split else 0})

    def measure_runs(self, name: str, sub: Benchmark) -> Measure:
        """Points measured by `run_point` on every fold split."""
        return lambda params: [self.run_point(name, params, sub, r) for r in range(len(self.splits))]

    def built_once(self, name: str, params: dict[str, Any]):
        """One retriever per build setting, its options set per trial: building a causal retriever prepares the
        graph (~30 s on HotpotQA's entity graph) and keeps its path caches, which every trial reuses."""
        option_keys = {f.name for f in fields(CausalRetrievalOptions)}
        build = {k: v for k, v in params.items() if k not in option_keys}
        key = point_key(build)
        if key not in self._built:
            self._built[key] = build_retriever(name, self.index, build, self.neighbors, None, self.graph,
                                               self.scorer_for(name, build))
        self._built[key].options = CausalRetrievalOptions(**{k: v for k, v in params.items() if k in option_keys})
        return self._built[key]

    def learned_shortlist(self, params: dict[str, Any]) -> dict[str, Any]:
        """Params whose learned shortlist is this run's: each train query shortlisted by the fold model that never
        saw it, as fusion/pairwise do (the model fitted on every train query ranks them nearly perfectly, which no
        weight may learn from). The first fold split's: the causal retriever is scored once per point (its answer
        model runs per candidate), and only its nested figure is averaged over the splits."""
        return {**params, "shortlist_params": {"retriever": self.out_of_fold[0]} if self.out_of_fold is not None
                else {"model": self.trained_model}}
