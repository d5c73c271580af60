"""Labels as evaluation truth and their agreement with gold: pure functions on small frames."""
from __future__ import annotations

import math

import pandas as pd

from causal_assets.core.measures.metrics import evaluate
from causal_assets.core.evaluation.truth import label_qrels
from causal_assets.core.labeling.quality import (auc, expected_precision_at, label_quality_rows,
                                                per_question_from_tables, summarize)


def _labels():
    return pd.DataFrame({
        "query_id": ["q1"] * 3 + ["q2"] * 2 + ["q1"] * 3,
        "chunk_id": ["a", "b", "c", "d", "e", "a", "b", "c"],
        "label": ["YES", "NO", "YES", "UNCERTAIN", "NO", "NO", "YES", "NO"],
        "effect": [5.0, -1.0, 3.5, 1.0, -2.0, 0.0, 4.0, 0.0],
        "estimator": ["regression"] * 5 + ["naive"] * 3})


def test_label_qrels_keep_the_configured_estimators_yes_labels_graded_by_effect():
    qrels = label_qrels(_labels())
    assert qrels == {"q1": {"a": 5.0, "c": 3.5}}       # q2 has no YES: left out; naive rows ignored
    assert label_qrels(_labels(), ["q2"]) == {}
    m = evaluate(qrels, {"q1": {"c": 3.0, "a": 2.0, "b": 1.0}}, ks=(2,))
    assert float(m[(m.metric == "precision") & (m.k == 2)]["value"].iloc[0]) == 1.0


def test_expected_precision_counts_ties_as_random_order():
    assert expected_precision_at([1, 1, 1, 1], [True, False, False, False], 2) == 0.25
    assert expected_precision_at([3, 2, 1, 0], [True, True, False, False], 2) == 1.0
    assert expected_precision_at([float("nan"), 1.0], [True, False], 1) == 0.0
    assert auc([1, 1], [True, False]) == 0.5 and auc([2, 1], [True, False]) == 1.0
    assert math.isnan(auc([1, 2], [True, True]))


def test_summary_compares_labels_with_the_containment_heuristic():
    per_q = [{"query_id": "q", "gold": [0, 1], "effects": [4.0, 3.0, 0.1, -1.0],
              "labels": ["YES", "UNCERTAIN", "NO", "NO"], "contains": [False, True, True, False]}]
    s = summarize(label_quality_rows(per_q))
    assert s["labels"]["precision"] == 1.0 and s["labels"]["recall"] == 0.5 and s["labels"]["uncertain_share"] == 0.25
    assert s["ranking"]["top2_precision"] == 1.0 and s["ranking"]["auc"] == 1.0
    assert s["containment"]["f1"] == 0.5 and s["containment_ranking"]["top2_precision"] == 0.5


def test_labels_are_graded_and_ranked_by_their_average_effect():
    """The average effect (over the random subsets) grades the YES labels and ranks the pool for label quality;
    a document without one (it never varied) keeps its context effect; tables without the column use `effect`."""
    labels = _labels().assign(average_effect=[2.0, -0.5, 3.0, 0.5, -1.0, 0.0, 2.0, 0.0])
    labels.loc[2, "average_effect"] = float("nan")
    assert label_qrels(labels) == {"q1": {"a": 2.0, "c": 3.5}}
    labels.loc[0, "average_effect"] = -0.2          # a YES label stays relevant
    assert label_qrels(labels)["q1"]["a"] == 1e-6
    pools = pd.DataFrame({"query_id": ["q1"] * 3, "chunk_id": ["a", "b", "c"], "position": [0, 1, 2],
                          "answer": ["x"] * 3, "aliases": ["[]"] * 3, "text": ["x", "y", "z"]})
    labels = _labels().assign(average_effect=[1.0, 4.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    per_q = per_question_from_tables(labels, pools, {"q1": {"a": 1, "c": 1}}, "regression")
    assert per_q[0]["effects"] == [1.0, 4.0, 2.0]   # `b` (NO, large average) ranks first: top-2 finds one gold
    assert summarize(label_quality_rows(per_q))["ranking"]["top2_precision"] == 0.5
