"""Parameter search for every tunable retriever, on a benchmark's train split only: `tune` runs each kind's
strategy (`core/tuning/strategies`), records every trial, and selects among the retrievers by their nested
cross-validated figures (`selection.compare_nested`). How each is searched and selected: docs/pipeline.md
("Tuning")."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from causal_assets.core.evaluation.answers import AnswerJudge
from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.registry.retrievers import KINDS
from causal_assets.core.tuning.context import TuningContext
from causal_assets.core.tuning.points import sample_queries  # noqa: F401 (the Dagster layer samples with it)
from causal_assets.core.tuning.selection import compare_nested
from causal_assets.core.registry.tuning import ORDER, TuningSpec
from causal_assets.core.tuning.strategies.causal import causal
from causal_assets.core.tuning.strategies.combination import combination
from causal_assets.core.tuning.strategies.coordinate import coordinate
from causal_assets.core.tuning.strategies.learned import learned
from causal_assets.core.tuning.strategies.sweep import sweep
from causal_assets.core.tuning.truths import TruthSelection, apply_selection, select_by_truths

STRATEGIES: dict[str, Callable[[TuningContext, str], Any]] = {
    "sweep": sweep, "fit": learned, "coordinate": coordinate, "combination": combination, "causal": causal}
TRIAL_COLUMNS = ["retriever", "trial", "params", "metric", "value", "evaluation", "queries", "seconds", "best"]


@dataclass
class TuningResult:
    trials: pd.DataFrame                         # one row per scored point (see `TRIAL_COLUMNS`)
    best: dict[str, dict[str, Any]]              # retriever -> {params, value, evaluation, queries}
    models: dict[str, Any] = field(default_factory=dict)   # retriever -> fitted CausalRelevanceModel
    query_ids: list[str] = field(default_factory=list)     # every query the tuner scored
    selection_note: str = ""                               # how far the selection can be trusted (`compare_nested`)
    nested: dict[str, dict[str, float]] = field(default_factory=dict)   # retriever -> nested figure per train query
    truths: TruthSelection | None = None                   # which retriever each truth selects (`tuning.truths`)

    @property
    def selected(self) -> str | None:
        """The selectable retriever with the best nested train figure (`selection.compare_nested` marks it).
        A result from before the mark: the best `selection_value` (ties: the earlier in `TUNABLE`), and from before
        `selectable` existed every retriever counts."""
        marked = [n for n, b in self.best.items() if b.get("selected")]
        if marked:
            return marked[0]
        eligible = [n for n, b in self.best.items() if b.get("selectable", True)]
        if not eligible:
            return None
        return max(eligible, key=lambda n: (self.best[n].get("selection_value", self.best[n]["value"]), -ORDER[n]))



def tune(index: CorpusIndex, bench: Benchmark, spec: TuningSpec, listed: dict[str, dict[str, Any]],
         neighbors=None, graph=None, mc_labels: pd.DataFrame | None = None, forbidden: tuple[str, ...] = (),
         log: Callable[[str], None] = lambda m: None,
         extra_sources: Callable[[str], tuple | None] | None = None,
         scorer: Callable[[], Any] | None = None, judge: AnswerJudge | None = None,
         answer_questions: int = 20) -> TuningResult:
    """Search every retriever of `spec.resolved_retrievers(listed)` on `bench`, each by its kind's strategy in the
    table's order (each after what it is built on), then select one.

    `listed`: the benchmark's evaluation retrievers and their fixed params (kept under the tuned ones, e.g.
    entity_first's budget `k`). `mc_labels`: Monte Carlo labels; only rows of `bench`'s questions are used.
    `forbidden`: split names that must never be tuned on (the eval splits). `extra_sources(name)`: (index, tune-split
    Benchmark, graph) of another benchmark named in `spec.learned_extra`, or None when it is not available.
    `scorer()`: the LLM's log-probability scorer; the causal retriever is then tuned with `answer_model: likelihood`
    unless its params name another (`causal_answer_model`), and without one with the lexical fallback. Its
    measurements go through the call cache, so every trial after the first re-reads them. `judge`: the answer gain's
    scorer for the selection by truth (`truths.select_by_truths`, at most `answer_questions` train questions);
    without it only the judgements and the labels select."""
    if bench.split in forbidden:
        raise ValueError(f"refusing to tune on split {bench.split!r}: it is an evaluation split")
    ctx = TuningContext(index, bench, spec, listed, neighbors, graph, mc_labels, log, extra_sources, scorer)
    for name in ctx.names:
        STRATEGIES[KINDS[name].tuning](ctx, name)
    note = compare_nested(ctx.best, ctx.nested_of, len(ctx.splits), spec.robust_default)
    if note:
        log(f"selection: {note}")
    if ctx.best:
        log("selection (nested; a sample's figure on its sample): " + ", ".join(
            f"{n} {b['selection_value']:.4f}" + ("" if b.get("selectable", True) else " (not selectable)")
            for n, b in sorted(ctx.best.items(), key=lambda x: -x[1]["selection_value"])) +
            f"; selected: {next((n for n, b in ctx.best.items() if b.get('selected')), None)}")
        for n, b in ctx.best.items():
            if "selection_margin" in b:
                log(f"{n}: {b['selection_margin']}")
    truths = select_by_truths(ctx, judge, spec.answer_k, answer_questions, log) if ctx.best else None
    if truths is not None:
        note = " ".join(x for x in (note, apply_selection(ctx, truths, spec.select_by)) if x)
    trials = pd.DataFrame(ctx.rows, columns=TRIAL_COLUMNS)
    return TuningResult(trials, ctx.best, ctx.models, sorted(ctx.scored_queries), note, ctx.nested_of, truths)
