"""Answer validators: HotpotQA-official EM/F1, containment for sentence answers, FQN matching."""
from __future__ import annotations

import pytest

from causal_assets.core.labeling.validators import (
    VALIDATORS,
    UnknownValidatorError,
    Validation,
    answer_containment,
    answer_f1,
    exact_match,
    fqn_match,
    token_f1,
    validate,
)
from causal_assets.core.text.answers import normalize_answer

NX_GOLD = "networkx.algorithms.shortest_paths.generic.shortest_path"
NX_ALIAS = "networkx.shortest_path"


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("The Beatles", "beatles"),
        ("  A  Tale of Two   Cities. ", "tale of two cities"),
        ("U.S.A.", "usa"),
        ("an apple, the pear & a plum!", "apple pear plum"),
        ("Theatre", "theatre"),  # articles only as whole words
        ("Anne's", "annes"),
        ("", ""),
        ("1,000,000", "1000000"),
        ("Yes.", "yes"),
    ],
)
def test_normalize_answer_matches_hotpot_official(raw, expected):
    assert normalize_answer(raw) == expected


def test_normalize_answer_removes_articles_after_punctuation():
    # official order: lower -> remove punctuation -> remove articles -> fix whitespace
    assert normalize_answer("the-a") == "thea"
    assert normalize_answer("(The) band") == "band"


def test_exact_match():
    assert exact_match("the Beatles!", "Beatles") == Validation(True, 1.0, exact_match("the Beatles!", "Beatles").detail)
    assert not exact_match("The Beatles band", "Beatles").passed
    assert exact_match("Paul", ["John", "paul"]).passed  # any of several gold answers


def test_token_f1_values():
    v = token_f1("Barack Obama", "Obama")
    assert v.score == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert token_f1("obama barack", "Barack Obama").score == pytest.approx(1.0)
    assert token_f1("Trump", "Obama").score == 0.0


@pytest.mark.parametrize(
    "pred, gold, f1",
    [
        ("yes", "yes", 1.0),
        ("Yes.", "yes", 1.0),
        ("no", "yes", 0.0),
        ("yes", "no", 0.0),
        ("yes they are", "yes", 0.0),  # gold is yes/no and normalised strings differ -> 0 (official rule)
        ("yes", "yes they are", 0.0),  # prediction is yes/no and differs -> 0
        ("noanswer", "Paris", 0.0),
        ("noanswer", "noanswer", 1.0),
        ("no", "no", 1.0),
    ],
)
def test_token_f1_yes_no_noanswer_rules(pred, gold, f1):
    assert token_f1(pred, gold).score == pytest.approx(f1)


def test_containment_whole_tokens_rush_vs_rushmore():
    sentence = "The Canadian rock band Rush released Moving Pictures in 1981."
    assert answer_containment(sentence, "Rush").passed
    assert not answer_containment("Rushmore", "Rush").passed
    assert not answer_containment("It was filmed at Mount Rushmore.", "Rush").passed
    assert answer_containment("It was Moving Pictures by Rush.", "Moving Pictures").passed
    assert not answer_containment("Pictures were moving", "Moving Pictures").passed  # contiguous, in order
    assert not answer_containment("anything", "The").passed  # gold empty after normalisation


def test_containment_yes_no():
    assert answer_containment("Yes, both are American.", "yes").passed
    assert not answer_containment("No, only one of them is.", "yes").passed
    assert answer_containment("No, they are not.", "no").passed
    assert not answer_containment("Yes, and no further details are known.", "no").passed


def test_answer_f1_threshold_or_containment():
    sentence = "The Canadian rock band Rush released Moving Pictures in 1981."
    v = answer_f1(sentence, "Rush")
    assert v.passed and v.score < 0.5 and "containment" in v.detail
    assert not answer_f1("Rushmore", "Rush").passed
    assert answer_f1("Barack Obama", "Obama").passed  # F1 0.667 >= 0.5
    assert answer_f1("Barack Hussein Obama Jr", "Obama", threshold=0.5).passed  # F1 0.4, but contained
    assert not answer_f1("George Bush", "George Washington", threshold=0.6).passed
    assert answer_f1("George Bush", "George Washington", threshold=0.5).passed


def test_fqn_match_full_and_alias():
    assert fqn_match(f"It is {NX_GOLD}.", NX_GOLD).detail.startswith("full gold")
    v = fqn_match("Call networkx.shortest_path(G, source, target).", NX_GOLD, aliases=[NX_ALIAS])
    assert v.passed and "alias" in v.detail
    # a re-export is not a suffix of the defining FQN: it is only accepted when given as an alias
    assert not fqn_match("Call networkx.shortest_path(G).", NX_GOLD).passed
    assert not fqn_match("networkx.dijkstra_path", NX_GOLD, aliases=[NX_ALIAS]).passed


def test_fqn_match_backticks_and_code_blocks():
    assert fqn_match(f"The function is `{NX_ALIAS}`.", NX_GOLD, aliases=[NX_ALIAS]).passed
    code = f"```python\nimport networkx as nx\nfrom networkx.algorithms.shortest_paths.generic import shortest_path\n```"
    v = fqn_match(code, NX_GOLD)
    assert v.passed and v.detail.startswith("full")
    assert fqn_match("Use `generic.shortest_path`", NX_GOLD).passed


def test_fqn_match_suffix_component_wise_and_ambiguity():
    # unambiguous suffix, written as code
    assert fqn_match("use `shortest_path`", NX_GOLD).passed
    # partial component is not a suffix
    assert not fqn_match("use `path`", NX_GOLD).passed
    # suffix that also names another known symbol is ambiguous
    known = [NX_GOLD, "scipy.sparse.csgraph.shortest_path"]
    v = fqn_match("use `shortest_path`", NX_GOLD, known_fqns=known)
    assert not v.passed and "ambiguous" in v.detail
    # ... but a longer suffix disambiguates
    assert fqn_match("use `generic.shortest_path`", NX_GOLD, known_fqns=known).passed
    # the answer itself names a different symbol with the same tail
    v = fqn_match("scipy.sparse.csgraph.shortest_path: call shortest_path(G)", NX_GOLD)
    assert not v.passed and "scipy" in v.detail
    # bare English word is not accepted as a suffix, code-formatted it is
    assert not fqn_match("You get the page back.", "requests.get").passed
    assert fqn_match("You `get` the page back.", "requests.get").passed
    assert fqn_match("Call get(url).", "requests.get").passed


def test_fqn_match_wrong_answer():
    v = fqn_match("scipy.sparse.csgraph.shortest_path", NX_GOLD, aliases=[NX_ALIAS])
    assert not v.passed and v.score == 0.0


def test_registry_and_validate():
    assert set(VALIDATORS) >= {"exact_match", "token_f1", "answer_containment", "answer_f1", "fqn_match"}
    assert validate("answer_f1", "The band Rush", "Rush").passed
    assert validate("fqn_match", "`networkx.shortest_path`", NX_GOLD, aliases=[NX_ALIAS]).passed
    assert validate("answer_f1", "Barack Hussein Obama II", "Obama", threshold=0.9).passed  # via containment
    with pytest.raises(UnknownValidatorError, match="unknown validator 'nope'.*answer_f1"):
        validate("nope", "a", "b")
    with pytest.raises(ValueError):
        validate("nope", "a", "b")
