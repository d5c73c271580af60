"""core/tuning/fusion.py: the hybrid fusion weight swept over precomputed scores agrees with the hybrid retriever
at each weight, and the best weight breaks ties toward 0.5."""
from __future__ import annotations

import pandas as pd
import pytest

from causal_assets.core.evaluation.runner import metric_value, run_benchmark, score_run
from causal_assets.core.retrievers.factory import build_retriever
from causal_assets.core.tuning.fusion import best_weight, sweep_fusion_weight
from tests.core.tiny_corpus import tiny_benchmark, tiny_index


def test_each_swept_weight_scores_what_the_hybrid_retriever_with_that_weight_scores():
    index, bench = tiny_index(), tiny_benchmark()
    grid = [0.0, 0.3, 0.7, 1.0]
    sweep = sweep_fusion_weight(index, bench, grid, metric="precision", k=1)
    assert sweep["weight"].tolist() == grid
    assert set(sweep["metric"]) == {"precision@1"} and set(sweep["split"]) == {"train"}
    for w, value in zip(sweep["weight"], sweep["value"]):
        hybrid = score_run(bench, run_benchmark(build_retriever("hybrid", index, {"weight": w}), bench), ks=(1,))
        assert value == pytest.approx(metric_value(hybrid, "precision", 1)), w
    # all BM25 ranks every question's paragraph first; all dense misses one (q2: the tower before its engineer)
    assert sweep["value"].iloc[0] == 1.0 and sweep["value"].iloc[-1] < 1.0


def test_best_weight_takes_the_maximum_and_breaks_ties_toward_one_half():
    sweep = pd.DataFrame({"weight": [0.0, 0.3, 0.8, 1.0], "value": [0.5, 0.7, 0.7, 0.6]})
    assert best_weight(sweep) == 0.3                       # |0.3 - 0.5| < |0.8 - 0.5|
    assert best_weight(sweep.assign(value=[0.5, 0.6, 0.7, 0.6])) == 0.8
    assert best_weight(pd.DataFrame({"weight": [0.2, 0.9], "value": [0.4, 0.4 + 1e-12]})) == 0.2   # isclose tie
