"""Which retriever each truth selects on the tune split (core/tuning/truths.py): the judgements' nested choice, the
Monte Carlo labels' and the answer gain's, each recorded; `tuning.select_by` makes one of them the selected
retriever. The answer gain is scored by the real solver (Gemma-3-270M, in-process) on the tiny corpus, whose
answers are the titles of the relevant paragraphs."""
from __future__ import annotations

import pandas as pd
import pytest

from causal_assets.core.evaluation.answers import AnswerJudge
from causal_assets.core.measures.metrics import ranked
from causal_assets.core.registry.tuning import TuningSpec
from causal_assets.core.tuning.search import tune
from tests.core.tiny_corpus import PARAGRAPHS, QUESTIONS, tiny_benchmark, tiny_index

SPEC = dict(retrievers=["hybrid", "rrf"], metric="mrr@10")


def labels_against_gold() -> pd.DataFrame:
    """YES labels on a paragraph other than each question's gold one: a truth that disagrees with the judgements."""
    others = list(PARAGRAPHS)
    rows = []
    for q, (_, gold) in QUESTIONS.items():
        wrong = others[(others.index(gold) + 1) % len(others)]
        rows += [(q, wrong, "YES", 0.4, "regression"), (q, gold, "NO", 0.0, "regression")]
    return pd.DataFrame(rows, columns=["query_id", "chunk_id", "label", "average_effect", "estimator"])


@pytest.mark.unit
def test_every_truth_choice_is_recorded_and_select_by_picks_one():
    index, bench = tiny_index(), tiny_benchmark()
    by_qrels = tune(index, bench, TuningSpec(**SPEC), {}, mc_labels=labels_against_gold())
    truths = by_qrels.truths
    assert truths.selected_by["qrels"] == by_qrels.selected and truths.selected_by["answers"] is None
    assert truths.questions["mc_labels"] == len(QUESTIONS) and truths.questions["answers"] == 0
    for name in ("hybrid", "rrf"):
        figures = truths.figures[name]
        assert figures["qrels"] == by_qrels.best[name]["selection_value"]
        assert 0 <= figures["mc_labels"] < figures["qrels"]   # the labels point away from the gold paragraphs
    label_choice = truths.selected_by["mc_labels"]
    assert label_choice == max(("hybrid", "rrf"), key=lambda n: truths.figures[n]["mc_labels"])
    by_labels = tune(index, bench, TuningSpec(**SPEC, select_by="mc_labels"), {}, mc_labels=labels_against_gold())
    assert by_labels.selected == label_choice
    assert by_labels.truths.content() == truths.content()   # the same figures; only the pick moved
    # no labels: that truth is not measured, and select_by it keeps the judgements' choice with a note
    plain = tune(index, bench, TuningSpec(**SPEC, select_by="mc_labels"), {})
    assert plain.selected == plain.truths.selected_by["qrels"] and "not measurable" in plain.selection_note


@pytest.mark.slow
def test_the_answer_gain_selects_with_the_real_solver_and_scores_no_context_once(scorer):
    index, bench = tiny_index(), tiny_benchmark()
    docs = {c: (index.chunks.iloc[index.position[c]]["title"], index.chunks.iloc[index.position[c]]["text"])
            for c in index.ids}
    judge = AnswerJudge(bench.queries, bench.answers, {}, lambda d, question: docs[d], scorer, "answer_containment")
    result = tune(index, bench, TuningSpec(**SPEC, select_by="answers", answer_k=1), {}, judge=judge,
                  answer_questions=5)
    truths = result.truths
    assert truths.questions["answers"] == 5 and truths.answer_k == 1
    figures = {n: truths.figures[n]["answers"] for n in ("hybrid", "rrf")}
    assert result.selected == truths.selected_by["answers"] == max(figures, key=figures.get)
    # the gold paragraph (its title is the answer) shown alone makes the answer likelier than no context
    gold = judge.gains({q: [bench.qrels[q].popitem()[0]] for q in list(bench.queries)[:5]}, 1)
    assert all(g > 0 for g in gold.values()), gold
    # each question's no-context prompt once across every ranking scored; a repeat is served by the cache
    asked = judge.prompts
    again = judge.gains({q: ranked({d: 1.0}) for q, d in ((q, next(iter(tiny_benchmark().qrels[q])))
                                                             for q in list(bench.queries)[:5])}, 1)
    assert judge.prompts == asked + 5 and again == gold
