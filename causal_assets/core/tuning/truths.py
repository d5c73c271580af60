"""Which retriever each truth selects on the tune split: the benchmark's judgements (`qrels`: the tuner's own nested
selection), the Monte Carlo labels (`mc_labels`: the tuning metric against the YES labels) and the answer gain
(`answers`: the solver's log-likelihood of the gold answer given the top k, minus none). Every figure is out of
sample where a model is fitted here (the learned kind, and a combination's learned member, rank each train question
with the fold model that never saw it), so the selections differ by what each truth rewards, not by memory. The
evaluation then scores the three selected retrievers on the eval splits under all three truths."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from causal_assets.core.evaluation.answers import AnswerJudge
from causal_assets.core.evaluation.truth import label_qrels
from causal_assets.core.measures.metrics import named_metric_per_query, ranked
from causal_assets.core.registry.benchmarks import restrict
from causal_assets.core.registry.tuning import ORDER
from causal_assets.core.tuning.context import TuningContext

TRUTHS = ("qrels", "mc_labels", "answers")


@dataclass
class TruthSelection:
    selected_by: dict[str, str | None]               # truth -> the retriever it selects (None: not measurable)
    figures: dict[str, dict[str, float]]             # retriever -> truth -> its train figure
    questions: dict[str, int] = field(default_factory=dict)   # truth -> train questions its figures are on
    answer_k: int = 3

    def content(self) -> dict[str, Any]:
        return {"selected_by": self.selected_by, "figures": self.figures, "questions": self.questions,
                "answer_k": self.answer_k}


def select_by_truths(ctx: TuningContext, judge: AnswerJudge | None, answer_k: int, answer_questions: int,
                     log: Callable[[str], None] = lambda m: None) -> TruthSelection:
    """Each truth's choice among the selectable tuned retrievers at their tuned params. `judge`: the answer gain's
    scorer (None: no answers truth); `answer_questions`: at most this many train questions with an answer (the
    first, in the split's order) are scored, `answer_k` documents shown."""
    t0 = time.perf_counter()
    names = [n for n, b in ctx.best.items() if b.get("selectable", True)]
    figures = {n: {"qrels": float(ctx.best[n].get("selection_value", ctx.best[n]["value"]))} for n in names}
    selected: dict[str, str | None] = {
        "qrels": next((n for n, b in ctx.best.items() if b.get("selected")), None), "mc_labels": None,
        "answers": None}
    judged = ctx.bench.query_ids()
    labelled = label_qrels(ctx.mc_labels, judged)
    answered = judge.answered(judged)[:answer_questions] if judge is not None else []
    questions = {"qrels": len(ctx.nested_of.get(selected["qrels"] or "", {})) or len(judged),
                 "mc_labels": len(labelled), "answers": len(answered)}
    wanted = set(labelled) | set(answered)
    if not names or not wanted:
        return TruthSelection(selected, figures, questions, answer_k)
    sub = restrict(ctx.bench, [q for q in judged if q in wanted])
    for n in names:
        run = ctx.ranked(n, ctx.best[n]["params"], sub, 0, depth=max(ctx.k, answer_k))
        if labelled:
            per = named_metric_per_query(labelled, {q: run.get(q, {}) for q in labelled}, ctx.spec.metric)
            figures[n]["mc_labels"] = float(np.mean(list(per.values())))
        if answered:
            gains = judge.gains({q: ranked(run.get(q, {})) for q in answered}, answer_k)
            figures[n]["answers"] = float(np.mean(list(gains.values())))
    for truth in ("mc_labels", "answers"):
        measured = [n for n in names if truth in figures[n]]
        if measured:
            selected[truth] = max(measured, key=lambda n: (figures[n][truth], -ORDER[n]))
    log("selection by truth on the tune split: " + "; ".join(
        f"{truth} ({questions[truth]} questions) -> {selected[truth]}" for truth in TRUTHS if selected[truth])
        + (f"; answer gain at k={answer_k}: {judge.prompts} prompts, {judge.scored} scored" if judge else "")
        + f" in {time.perf_counter() - t0:.0f}s")
    return TruthSelection(selected, figures, questions, answer_k)


def apply_selection(ctx: TuningContext, choice: TruthSelection, truth: str) -> str | None:
    """Make `truth`'s choice the tuned configuration's selected retriever (`tuning.select_by`); returns a note
    when that truth could not be measured and the judgements' choice stands."""
    pick = choice.selected_by.get(truth)
    if truth == "qrels":
        return None
    if pick is None:
        return (f"select_by {truth}: not measurable on the tune split ({choice.questions.get(truth, 0)} questions); "
                f"the judgements' choice stands")
    for name, best in ctx.best.items():
        best["selected"] = name == pick
    return None
