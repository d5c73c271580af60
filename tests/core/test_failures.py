import re

import pytest

from causal_assets.core.evaluation.failures import (
    BUCKET_RULES, COLUMNS, SPECIFICITY_MIN_DF, CorpusTerms, classify_failures)

# 100 filler docs with unique words keep document frequencies of the test terms low (< 5%)
FILLER = {f"filler{i}": f"lorem{i} ipsum{i}" for i in range(100)}


def analyzer(text):
    return re.findall(r"\w+", text.lower())


def classify(query, docs, gold, ranking, k=3, labels=None):
    """One query; `ranking` lists doc ids best first; returns (bucket, detail)."""
    run = {"q": {d: float(len(ranking) - i) for i, d in enumerate(ranking)}}
    qrels = {"q": labels or {g: 1 for g in gold}}
    df = classify_failures({"q": query}, qrels, run, CorpusTerms.of(FILLER | docs, analyzer), k)
    assert list(df.columns) == COLUMNS and len(df) == 1
    row = df.iloc[0]
    assert row["rule"] == BUCKET_RULES[row["bucket"]]
    return row["bucket"], row["detail"]


SEQ = "sequential workflow agent, not parallel"  # a hard negative sharing all query terms


def test_hit_is_not_a_failure():
    docs = {"par": "parallel workflow agent", "seq": SEQ}
    bucket, detail = classify("parallel workflow agent", docs, ["par"], ["seq", "par", "filler1"])
    assert bucket == "none" and "rank 2" in detail


def test_hit_beyond_k_is_a_failure():
    docs = {"par": "parallel workflow agent", "seq": SEQ}
    bucket, _ = classify("parallel workflow agent", docs, ["par"], ["seq", "par"], k=1)
    assert bucket == "distractor_overlap"


def test_vocabulary_mismatch():
    docs = {"par": "ParallelAgent runs sub agents in parallel", "x": "concurrent queue"}
    bucket, detail = classify("concurrent workers execution", docs, ["par"], ["x", "filler1", "filler2"])
    assert bucket == "vocabulary_mismatch"
    assert "0/3" in detail


@pytest.mark.parametrize("gold_text, mismatch", [
    ("concurrent sub agents", True),              # 1 of 3 query terms: below 50%
    ("concurrent workers in parallel", False),    # 2 of 3
])
def test_vocabulary_mismatch_threshold(gold_text, mismatch):
    docs = {"par": gold_text, "x": "queue"}
    bucket, _ = classify("concurrent workers execution", docs, ["par"], ["x", "filler1"])
    assert (bucket == "vocabulary_mismatch") == mismatch


def test_vocabulary_uses_best_matching_gold():
    docs = {"g1": "nothing shared", "g2": "concurrent workers pool", "x": "concurrent queue"}
    bucket, _ = classify("concurrent workers execution", docs, ["g1", "g2"], ["x", "filler1"])
    assert bucket != "vocabulary_mismatch"  # g2 shares 2 of 3 terms


def test_specificity_gap_single_term():
    docs = {"par": "parallel agent", "seq": "sequential agent"}
    bucket, _ = classify("agent", docs, ["par"], ["seq", "filler1", "filler2"])
    assert bucket == "specificity_gap"


def test_specificity_gap_common_terms_wins_over_distractor():
    # "run" and "agent" are in 6 of 106 docs (>= 5%), and the top doc also matches both terms
    common = {f"c{i}": f"run agent variant{i}" for i in range(5)}
    assert 6 / (len(FILLER) + 6) >= SPECIFICITY_MIN_DF
    bucket, detail = classify("run agent", common | {"par": "run parallel agent"}, ["par"],
                              ["c0", "c1", "c2", "par"])
    assert bucket == "specificity_gap"
    assert "in 6/106 docs" in detail


def test_distractor_overlap():
    docs = {"par": "parallel workflow agent runs children concurrently",
            "seq": "sequential workflow agent runs children in parallel order"}
    bucket, detail = classify("parallel workflow agent", docs, ["par"], ["filler1", "seq", "par"], k=2)
    assert bucket == "distractor_overlap"
    assert detail.startswith("seq at rank 2 has 3/3")


def test_other_when_gold_matches_better_than_top_k():
    docs = {"par": "parallel workflow agent", "half": "workflow agent"}
    bucket, _ = classify("parallel workflow agent", docs, ["par"], ["half", "filler1", "par"], k=2)
    assert bucket == "other"


def test_other_when_gold_text_missing():
    bucket, detail = classify("parallel workflow agent", {}, ["unknown"], ["filler1"])
    assert bucket == "other" and "no text" in detail


def test_only_relevant_labels_are_gold_and_empty_queries_skipped():
    docs = {"par": "parallel workflow agent", "seq": SEQ}
    qrels = {"q": {"par": 1, "seq": 0}, "q_none": {"seq": 0}}
    run = {"q": {"seq": 2.0, "par": 1.0}, "q_none": {"seq": 1.0}}
    df = classify_failures({"q": "parallel workflow agent", "q_none": "x"}, qrels, run,
                           CorpusTerms.of(FILLER | docs, analyzer), 1)
    assert df["query_id"].tolist() == ["q"]
    assert df["bucket"].tolist() == ["distractor_overlap"]  # "seq" (label 0) is a distractor


def test_every_bucket_has_a_rule():
    assert set(BUCKET_RULES) == {"none", "vocabulary_mismatch", "specificity_gap",
                                 "distractor_overlap", "other"}


def test_missing_query_text_raises():
    with pytest.raises(KeyError):
        classify_failures({}, {"q": {"a": 1}}, {}, CorpusTerms.of({"a": "text"}, analyzer), 3)
