"""The causal strategy: coordinate ascent over the causal retriever's space with the answer model it will be
evaluated with. With the LLM's likelihood every candidate setting costs its own measurements, so the search runs
in two stages: the candidates (shortlist, sizes, graph, hops) chosen with the offline lexical model over the whole
space, then the LLM's measures weighed on those candidates (weights and min_relevance only), the diversity filter
off (a ranking keeps every candidate, and the filter's context sets double the prompts). Its nested figure spans
both stages (`two_stage_nested`)."""
from __future__ import annotations

from typing import Any

import numpy as np

from causal_assets.core.registry.benchmarks import Benchmark, restrict
from causal_assets.core.measures.metrics import named_metric_per_query
from causal_assets.core.evaluation.runner import run_benchmark
from causal_assets.core.retrievers.factory import causal_answer_model
from causal_assets.core.tuning.context import Measure, TuningContext, given_model, trained_here
from causal_assets.core.tuning.points import flat, nested
from causal_assets.core.tuning.selection import best_without, held_folds, mean_per_query, nested_scores
from causal_assets.core.tuning.strategies.coordinate import start_point

WEIGHED = ("weights", "min_relevance")   # what the second stage searches
# what the second stage sets itself: the LLM's model, the filter off
SECOND_STAGE = (*WEIGHED, "answer_model", "answer_model_params", "diversity_threshold")


def causal(ctx: TuningContext, name: str) -> None:
    space, given, fixed = ctx.start(name)
    # stored with the config, so the evaluation runs the answer model that was tuned
    fixed = {**fixed, "answer_model": causal_answer_model(fixed, ctx.scorer is not None)}
    ctx.log(f"{name}: answer model {fixed['answer_model']}" + (
        "" if fixed["answer_model"] != "lexical" or "answer_model" in given
        else " (fallback: no log-probability scorer configured)"))
    sub = ctx.sample(name)
    measure = _measure(ctx, name, sub)
    start, note, candidates = start_point(name, given, space), "", None
    if fixed["answer_model"] == "likelihood":
        llm_params = {k: v for k, v in fixed.items() if k == "answer_model_params"}
        lexical = {**{k: v for k, v in fixed.items() if k not in llm_params}, "answer_model": "lexical"}
        first = ctx.search(name, sub, space, lexical, start, measure, "candidates, lexical model")
        candidates = ctx.choices[0].searched[name]
        chose = flat(first["params"], space)
        fixed = {**nested({k: v for k, v in chose.items() if k not in WEIGHED}), **llm_params,
                 "answer_model": "likelihood", "diversity_threshold": 0.0}
        space = {k: v for k, v in space.items() if k in WEIGHED}
        start = {k: chose[k] for k in WEIGHED if k in chose}
        note = "answer likelihood on those candidates"
    chosen = ctx.search(name, sub, space, fixed, start, measure, note)
    if candidates is not None:
        ctx.nested_of[name] = two_stage_nested(ctx, name, candidates, sub)
        ctx.log(f"{name}: nested {np.mean(list(ctx.nested_of[name].values())):.4f} over both searches")
    if trained_here(chosen["params"].get("shortlist")) and not given_model(fixed):
        chosen["params"]["shortlist_params"] = {"model_path": "@learned"}   # resolved by the store


def _measure(ctx: TuningContext, name: str, sub: Benchmark) -> Measure:
    """A point's figure: one run (the same on every fold split); a shortlist this run trains ranks each train query
    with its out-of-fold model, and without a model trained here the point is not available."""
    def measure(params: dict[str, Any]):
        if trained_here(params.get("shortlist")) and not given_model(params):
            if ctx.trained_model is None:
                return None
            params = ctx.learned_shortlist(params)
        # the causal retriever asks its answer model per candidate: trials report progress and figure
        rr = run_benchmark(ctx.built_once(name, params), sub, ctx.k, name, progress=ctx.log)
        return [named_metric_per_query(sub.qrels, rr.run, ctx.spec.metric)] * len(ctx.splits)
    return measure


def two_stage_nested(ctx: TuningContext, name: str, candidates: tuple[list[dict[str, Any]], list[dict[str, float]]],
                     sub: Benchmark) -> dict[str, float]:
    """The nested figure over both stages: each fold's queries scored with the candidate settings (the lexical
    search) and the weights (the LLM's) each chosen without that fold. Where the settings chosen without the fold
    are those chosen on every query, that is the second search's own nested figure; else the fold's queries are
    re-run with those settings (and the weights chosen without the fold, which were searched on the settings of
    every query). Without this the settings' choice on every query passed into the figure unpaid."""
    (first, first_scores), (second, second_scores) = candidates, ctx.choices[0].searched[name]
    everywhere = first[best_without(first_scores, set())]
    by_split = []
    for folds in ctx.splits:
        out = nested_scores(second_scores, folds)   # right for every fold whose settings do not move
        for _, held in held_folds(folds, second_scores):
            settings = first[best_without(first_scores, set(held))]
            if settings == everywhere:
                continue
            j = best_without(second_scores, set(held))
            params = {**second[j], **{k: v for k, v in settings.items() if k not in SECOND_STAGE}}
            if trained_here(params.get("shortlist")) and not given_model(params):
                params = ctx.learned_shortlist(params)
            part = restrict(sub, held)
            rr = run_benchmark(ctx.built_once(name, params), part, ctx.k, name, progress=ctx.log)
            out.update(named_metric_per_query(part.qrels, rr.run, ctx.spec.metric))
            ctx.log(f"{name}: fold of {len(held)} queries re-run with the settings chosen without it")
        by_split.append(out)
    return mean_per_query(by_split)
