"""The Monte Carlo labels as evaluation ground truth: which documents measurably helped the solver answer.

A labelled question's relevant documents are its ``YES`` labels, graded by their effect size (the average effect
the labels are ranked by, `schemas.ranking_effect`: nats of answer log-likelihood, or success probability
for pass/fail labels); ``NO`` and ``UNCERTAIN`` documents are not relevant.
Questions without a ``YES`` label have no relevant document and are left out (their number is reported).
"""
from __future__ import annotations

import math

import pandas as pd

from causal_assets.core.measures.metrics import Qrels
from causal_assets.core.foundation.schemas import ranking_effect


def label_qrels(labels: pd.DataFrame | None, query_ids=None) -> Qrels:
    """{question: {doc: effect}} of the YES labels of the configured estimator (the rows that are not the naive
    comparison), optionally restricted to ``query_ids``."""
    if labels is None or not len(labels):
        return {}
    main = labels[labels["estimator"] != "naive"] if (labels["estimator"] != "naive").any() else labels
    yes = main[main["label"] == "YES"]
    if query_ids is not None:
        yes = yes[yes["query_id"].isin(set(query_ids))]
    out: Qrels = {}
    for q, d, e in zip(yes["query_id"], yes["chunk_id"], ranking_effect(yes)):
        # a YES document is always relevant: a grade above 0 even where its average effect is not positive
        out.setdefault(str(q), {})[str(d)] = max(float(e), 1e-6) if math.isfinite(e) else 1e-6
    return out
