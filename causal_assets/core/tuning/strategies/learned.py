"""The learned strategy: the causal-relevance model's target, hyperparameters (and question-likelihood feature)
chosen by grouped CV on the train queries, then the refit model and, per fold split, the out-of-fold retriever the
combinations and the causal shortlist rank the train queries with."""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import pandas as pd

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.registry.retrievers import FIRST_STAGE
from causal_assets.core.retrievers.learned.features import QUESTION_LIKELIHOOD, FeatureExtractor
from causal_assets.core.retrievers.learned.retriever import (LearnedRetriever, attach_target, candidate_table,
                                                              cross_validate, fit_model, grid_for)
from causal_assets.core.tuning.context import TuningContext
from causal_assets.core.tuning.selection import mean_per_query
from causal_assets.core.registry.tuning import TuningSpec


def learned(ctx: TuningContext, name: str) -> None:
    """Fit the model on the first stage's tuned weight and BM25 statistics; its params name the model (`@learned`),
    whose target and hyperparameters live in the model and the trials."""
    space, given, fixed = ctx.start(name)
    first = ctx.best.get(FIRST_STAGE, {}).get("params", {})
    spec = ctx.spec
    likelihood = spec.learned_question_likelihood and ctx.scorer is not None
    if spec.learned_question_likelihood and not likelihood:
        ctx.log(f"{name}: no log-probability scorer configured: tuned without the question-likelihood feature")
    model, points, secs, queries, oof, per_query = fit_learned(
        ctx.index, ctx.bench, spec, ctx.splits, ctx.graph, ctx.mc_labels, first.get("weight", 0.7), ctx.log,
        first.get("within_stats", "corpus"), ctx.extra_sources, ctx.scorer() if likelihood else None)
    ctx.out_of_fold, ctx.trained_model = oof, model
    ctx.scored_queries |= set(ctx.bench.query_ids())
    chosen = ctx.record(name, points, f"cv{spec.cv_folds}" + (f" x {len(ctx.splits)} fold splits"
                                                              if len(ctx.splits) > 1 else ""),
                        queries, secs, fixed, [mean_per_query(p) for p in zip(*per_query)], per_query,
                        fold_choices=False)
    ctx.models[name] = model
    chosen["chosen"] = chosen["params"]
    chosen["params"] = {**fixed, "depth": model.extractor_settings["depth"], "model_path": "@learned"}


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
    return mc_labels[mc_labels["query_id"].isin(set(bench.query_ids()))]


def extra_rows(table: pd.DataFrame, bench: Benchmark, spec: TuningSpec, extra_sources, log: Callable[[str], None],
               weight: float, within_stats: str, scorer) -> tuple[pd.DataFrame, dict[str, dict[str, float]],
                                                                  dict[str, int]]:
    """`table` with the candidate rows of the other benchmarks `spec.learned_extra` names (their tune splits, their
    own indexes), their qrels and question counts; one not available is left out and said."""
    likelihood = scorer is not None
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
    return table, extra_qrels, extra_counts


def fit_learned(index: CorpusIndex, bench: Benchmark, spec: TuningSpec, splits: list[list[list[str]]], graph,
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
    table, extra_qrels, extra_counts = extra_rows(table, bench, spec, extra_sources, log, weight, within_stats,
                                                  scorer)
    labels = labels_of(bench, mc_labels)
    targets = [t for t in spec.learned_targets
               if t == "qrels" or (t == "delta_p" and labels is not None
                                   and labels["query_id"].nunique() >= spec.min_mc_questions)]
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
