"""Issue 15, finding 11: `no_trial_from_errored_call` and `labels_sane` fail on the faults they name (corrupting
tests: each check is fed the fault and must fail; the shipped in-op versions passed them)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from causal_assets.core.checks import check_labels, check_trials_from_ok_calls


def _calls():
    return pd.DataFrame({"question_id": ["q1", "q1", "q1"], "status": ["ok", "ok", "error"],
                         "call_key": ["k1", "k2", None]})


def _trials(keys):
    return pd.DataFrame({"question_id": ["q1"] * len(keys), "call_key": keys, "success": [True] * len(keys)})


def _old_no_trial_from_errored_call(trials, calls) -> bool:
    """The check as shipped in defs/labels.py (kept here to show the corruption got past it)."""
    errored = set(calls.loc[calls["status"] == "error", "call_key"].dropna())
    return int(trials["call_key"].isin(errored).sum() + trials["call_key"].isna().sum()) == 0


def test_trial_from_an_errored_call_fails_the_check():
    assert check_trials_from_ok_calls(_trials(["k1", "k2"]), _calls()).passed
    corrupt = _trials(["k1", "k2", "k3"])          # a trial scored from the errored call (its key is no ok call's)
    assert _old_no_trial_from_errored_call(corrupt, _calls())
    outcome = check_trials_from_ok_calls(corrupt, _calls())
    assert not outcome.passed
    assert outcome.metadata["bad_trials_not_from_an_ok_call"] == 1
    assert outcome.metadata["bad_questions_with_more_trials_than_ok_calls"] == 1
    other_question = pd.DataFrame({"question_id": ["q2"], "call_key": ["k1"], "success": [True]})
    assert not check_trials_from_ok_calls(other_question, _calls()).passed


def _labels(**change):
    frame = pd.DataFrame({"question_id": ["q1", "q1"], "doc_id": ["a", "b"], "label": ["YES", "NO"],
                          "delta_p": [0.4, -0.1], "ci_low": [0.2, -0.3], "ci_high": [0.6, 0.1],
                          "base_success_rate": [0.3, 0.3], "success_rate": [0.5, 0.5]})
    return frame.assign(**change)


def _old_labels_sane(labels) -> bool:
    in_range = bool(labels[["delta_p", "ci_low", "ci_high"]].abs().le(1).all().all())
    no_base = int(labels.groupby("question_id")["success_rate"].apply(lambda x: x.isna().all()).sum())
    return in_range and no_base == 0


def test_labels_without_a_base_rate_fail_labels_sane():
    assert check_labels(_labels()).passed
    for corrupt, figure in ((_labels(base_success_rate=[np.nan, np.nan]), "bad_questions_without_base_rate"),
                            (_labels(base_success_rate=[1.5, 1.5]), "bad_questions_without_base_rate"),
                            (_labels(ci_low=[0.7, -0.3]), "bad_ci_inverted"),
                            (_labels(label=["MAYBE", "NO"]), "bad_unknown_labels")):
        assert _old_labels_sane(corrupt)          # the shipped check let each of these through
        outcome = check_labels(corrupt)
        assert not outcome.passed and outcome.metadata[figure] >= 1, outcome.metadata
    nan_dp = _labels(delta_p=[np.nan, -0.1])
    assert not check_labels(nan_dp).passed and check_labels(nan_dp).metadata["bad_non_finite"] == 1


def test_empty_outputs_pass_and_missing_columns_fail():
    assert check_labels(pd.DataFrame([]).assign(benchmark="b")).passed
    assert not check_labels(pd.DataFrame({"question_id": ["q"]})).passed
    empty_trials = pd.DataFrame(columns=["question_id", "call_key"])
    assert check_trials_from_ok_calls(empty_trials, _calls()).passed
