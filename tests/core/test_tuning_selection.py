"""The selection statistics on hand-made figures: nested scores over folds and repeated fold splits, the paired
margin and its one-standard-error rule, the choice among retrievers, the robust default and the nested figure of a
combination whose ingredients were chosen too."""
from __future__ import annotations

import math

import pytest

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.tuning.selection import (FoldChoices, best_without, choose, compare_nested, fold_groups,
                                                held_folds, mean_per_query, nested_scores, paired_margin,
                                                repeated_folds)
from causal_assets.core.registry.tuning import TUNABLE, TuningSpec


def selected(best):
    """The retriever `compare_nested` marked."""
    return next((n for n, b in best.items() if b.get("selected")), None)


def test_best_without_takes_the_best_mean_outside_the_held_queries_and_the_earliest_on_ties():
    per_trial = [{"a": 0.5, "b": 0.5}, {"a": 0.0, "b": 0.9}, {"a": 1.0, "b": 0.0}]
    assert best_without(per_trial, set()) == 0                 # 0.5 = 0.5 > 0.45: the earliest of the tie
    assert best_without(per_trial, {"a"}) == 1                 # on b alone
    assert best_without(per_trial, {"b"}) == 2                 # on a alone
    assert best_without(per_trial, {"a", "b"}) == 0            # nothing left: every mean 0, the earliest


def test_held_folds_yields_each_fold_with_the_queries_scored():
    assert list(held_folds([["a", "x"], ["y"], ["b"]], [{"a": 1.0}, {"b": 0.0}])) == [(0, ["a"]), (2, ["b"])]
    assert list(held_folds([["a"]], [])) == []


def test_mean_per_query_keeps_a_figure_equal_on_every_split_bit_for_bit():
    x = 0.1 + 0.2                                              # a value whose float mean of three may move
    assert mean_per_query([{"a": x, "b": 0.0}, {"a": x}, {"a": x, "b": 1.0}]) == {"a": x, "b": 0.5}
    assert list(mean_per_query([{"b": 1.0}, {"a": 0.0, "b": 1.0}])) == ["b", "a"]   # first-seen order


def test_paired_margin_is_the_mean_difference_and_its_standard_error_on_common_queries():
    diff, se, n = paired_margin({"a": 0.9, "b": 0.7, "c": 0.5, "z": 1.0}, {"a": 0.8, "b": 0.4, "c": 0.5})
    assert n == 3 and diff == pytest.approx((0.1 + 0.3 + 0.0) / 3)
    d = [0.1, 0.3, 0.0]
    sd = math.sqrt(sum((x - diff) ** 2 for x in d) / 2)
    assert se == pytest.approx(sd / math.sqrt(3))
    assert paired_margin({"a": 1.0}, {"a": 0.0})[1] == float("inf")        # one query: no standard error
    assert math.isnan(paired_margin({"a": 1.0}, {"b": 0.0})[0])             # none in common


def test_choose_compares_on_every_query_and_lets_a_sample_win_only_where_it_beats_all():
    full = {"hybrid": {"a": 0.5, "b": 0.5}, "learned": {"a": 0.6, "b": 0.4}}
    assert choose({}) is None
    assert choose(full) == "hybrid"                                         # tie on the mean: earlier in TUNABLE
    assert TUNABLE.index("hybrid") < TUNABLE.index("learned")
    assert choose({**full, "causal": {"a": 0.55}}) == "hybrid"              # beats hybrid on a, not learned
    assert choose({**full, "causal": {"a": 0.7}}) == "causal"               # beats both on its sample
    # none scored on every query: the sampled ones compared on the queries they share (a)
    assert choose({"causal": {"a": 0.3, "b": 0.1}, "query_likelihood": {"a": 0.2, "c": 0.9}}) == "causal"


def test_repeated_folds_draws_one_split_per_seed_keeping_shared_documents_together():
    qrels = {"q1": {"d1": 1.0}, "q2": {"d1": 1.0}, "q3": {"d2": 1.0}, "q4": {"d3": 1.0}, "q5": {"d4": 1.0}}
    bench = Benchmark("b", "train", {q: q for q in [*qrels, "unjudged"]}, qrels)
    splits = repeated_folds(TuningSpec(cv_folds=2, cv_repeats=3, seed=7), bench)
    assert len(splits) == 3
    for folds in splits:
        assert sorted(q for fold in folds for q in fold) == sorted(qrels)   # judged queries only, each once
        assert any({"q1", "q2"} <= set(fold) for fold in folds)             # they share d1
    assert splits == repeated_folds(TuningSpec(cv_folds=2, cv_repeats=3, seed=7), bench)   # seeded
    assert splits[0] == repeated_folds(TuningSpec(cv_folds=2, seed=7), bench)[0]


def test_the_nested_figure_does_not_reward_a_lucky_choice():
    """Point 1 beats the steady point 0 on the whole train set by two queries it happens to get right; chosen on
    the other folds, each held-out query is scored by whichever point did best without it."""
    steady = {"a": 0.6, "b": 0.6, "c": 0.6, "d": 0.6}
    lucky = {"a": 1.0, "b": 1.0, "c": 0.2, "d": 0.3}
    folds = [["a"], ["b"], ["c"], ["d"]]
    assert sum(lucky.values()) / 4 > sum(steady.values()) / 4            # the best train figure: lucky, 0.625
    # a, b held out: steady wins on the rest (0.6 vs 0.5); c, d held out: lucky wins (0.767, 0.733) and scores low
    assert nested_scores([steady, lucky], folds) == pytest.approx({"a": 0.6, "b": 0.6, "c": 0.2, "d": 0.3})
    assert nested_scores([lucky], folds) == pytest.approx(lucky)          # nothing chosen: the figure itself
    assert nested_scores([steady, lucky], [["a", "x"], ["c"]]) == pytest.approx({"a": 0.6, "c": 0.2})


def test_selection_compares_nested_figures_on_the_queries_both_were_scored_on():
    """pairwise beats learned on all four queries; causal, scored on a sample of two, beats pairwise there but not
    learned: the best on every query is kept. Only a sampled retriever that beats every fully scored one on its
    sample is selected over them."""
    best = {"pairwise": {"value": 0.927, "trials": 11}, "learned": {"value": 0.913, "trials": 3},
            "causal": {"value": 0.921, "trials": 18}}
    nested_scores_of = {"pairwise": {"a": 0.9, "b": 0.9, "c": 0.9, "d": 0.9},
                        "learned": {"a": 1.0, "b": 1.0, "c": 0.8, "d": 0.7},
                        "causal": {"a": 0.95, "b": 0.95}}                   # scored on a sample of two
    compare_nested(best, nested_scores_of)
    assert {n: b["selection_value"] for n, b in best.items()} == pytest.approx(
        {"pairwise": 0.9, "learned": 0.875, "causal": 0.95})
    assert best["causal"]["selection_evaluation"].endswith("on 2 train queries (a sample)")
    assert best["learned"]["selection_evaluation"].endswith("on 4 train queries")
    assert selected(best) == "pairwise"
    # a sample on which causal beats both: causal
    compare_nested(best, {**nested_scores_of, "causal": {"a": 1.0, "b": 1.0, "c": 1.0}})
    assert selected(best) == "causal" and not best["pairwise"].get("selected")


def test_a_combination_is_selected_only_beyond_the_noise_of_what_it_is_built_on():
    """pairwise (over fusion, over learned + hybrid) wins the nested figure by a few lucky queries: within one
    standard error of the paired difference to learned, so learned is selected; a combination that gains on every
    query over every ingredient is selectable."""
    learned = {q: 0.8 for q in "abcdefgh"}
    hybrid = {q: 0.6 for q in "abcdefgh"}
    fusion = {**learned, "a": 0.9}                                    # +0.0125: one query of eight
    pairwise = {**fusion, "b": 1.0, "c": 0.7}                         # +0.025 over fusion, +0.0375 over learned
    best = {"learned": {"value": 0.8, "trials": 3, "params": {"model_path": "@learned"}},
            "hybrid": {"value": 0.6, "trials": 9, "params": {"weight": 0.5}},
            "fusion": {"value": 0.81, "trials": 5, "params": {"members": {"learned": {}, "hybrid": {}}}},
            "pairwise": {"value": 0.84, "trials": 7, "params": {"base": {"fusion": {}}}}}
    compare_nested(best, {"learned": learned, "hybrid": hybrid, "fusion": fusion, "pairwise": pairwise})
    assert best["pairwise"]["selection_value"] > best["learned"]["selection_value"]
    assert not best["pairwise"]["selectable"] and not best["fusion"]["selectable"]
    assert "not beyond the noise of" in best["pairwise"]["selection_margin"]
    assert "over fusion" in best["pairwise"]["selection_margin"] and "over learned" in best["pairwise"]["selection_margin"]
    assert best["learned"]["selectable"] and "selection_margin" not in best["learned"]
    assert selected(best) == "learned"
    # a steady gain on every query is beyond the noise: the combination is selected
    steady = {q: v + 0.05 + 0.01 * (i % 2) for i, (q, v) in enumerate(learned.items())}
    best["pairwise"]["params"] = {"base": {"learned": {}}}
    compare_nested(best, {"learned": learned, "hybrid": hybrid, "fusion": fusion, "pairwise": steady})
    assert best["pairwise"]["selectable"] and selected(best) == "pairwise"


def test_a_winner_within_the_noise_of_the_robust_default_gives_way_to_it():
    """A small question file (23 MuSiQue train questions) selected entity_first by 0.006 nested MAP@10, and it lost
    to learned by 0.08 on unseen questions. The winner must beat the robust default beyond one standard error of
    their paired difference; the note says how far the selection can be trusted."""
    default = {q: 0.70 + 0.1 * (i % 3) for i, q in enumerate("abcdefghij")}
    lucky = {**default, "a": default["a"] + 0.06}                     # +0.006: one query of ten
    best = {"learned": {"value": 0.8, "trials": 3, "params": {}}, "entity_first": {"value": 0.81, "trials": 9,
                                                                                 "params": {}}}
    note = compare_nested(best, {"learned": default, "entity_first": lucky}, robust_default="learned")
    assert selected(best) == "learned" and not best["entity_first"].get("selected")
    assert note.startswith("`learned` selected, the robust default: the best nested train figure, `entity_first`'s, "
                           "is +0.0060 over it on 10 train queries (1 SE 0.0060), within the noise"), note
    # beyond the noise (a gain on every query): the winner stands, and the note says by how much
    steady = {q: v + 0.05 for q, v in default.items()}
    note = compare_nested(best, {"learned": default, "entity_first": steady}, robust_default="learned")
    assert selected(best) == "entity_first"
    assert note.startswith("`entity_first` selected: +0.0500 over the robust default `learned` on 10 train queries")
    assert note.endswith("beyond the noise")
    # the default wins: the note says how far ahead of the next best it is
    note = compare_nested(best, {"learned": steady, "entity_first": default}, robust_default="learned")
    assert selected(best) == "learned"
    assert "the robust default, +0.0500 over the next best `entity_first`" in note
    # one train query: nothing can be told apart, the default is selected
    note = compare_nested(best, {"learned": {"a": 0.1}, "entity_first": {"a": 0.9}}, robust_default="learned")
    assert selected(best) == "learned" and "(1 SE inf), within the noise" in note
    # a registry can turn it off, or name another default
    assert compare_nested(best, {"learned": default, "entity_first": lucky}) == ""
    assert selected(best) == "entity_first"
    assert TuningSpec().robust_default in TUNABLE
    with pytest.raises(ValueError, match="robust_default 'bm99' is not a tunable retriever"):
        TuningSpec(robust_default="bm99")


def test_the_causal_retriever_must_beat_the_shortlist_it_reranks_beyond_the_noise():
    """The causal retriever re-ranks a tuned retriever's shortlist with LLM measures per candidate: like a
    combination it is taken only where it beats that retriever by more than one standard error."""
    learned = {q: 0.8 for q in "abcdef"}
    best = {"learned": {"value": 0.8, "trials": 6, "params": {"model_path": "@learned"}},
            "causal": {"value": 0.85, "trials": 46, "params": {"shortlist": "learned", "answer_model": "likelihood"}}}
    compare_nested(best, {"learned": learned, "causal": {**learned, "a": 1.0}})     # one query of six
    assert not best["causal"]["selectable"] and "over learned" in best["causal"]["selection_margin"]
    assert selected(best) == "learned"
    best["causal"]["params"]["shortlist"] = "bm25"                                  # not a tuned retriever
    compare_nested(best, {"learned": learned, "causal": {**learned, "a": 1.0}})
    assert best["causal"]["selectable"] and selected(best) == "causal"


def test_a_combination_does_not_inherit_the_train_optimism_of_its_ingredients():
    """pairwise at its zero weights is its base (fusion) itself. Fusion's best train point is lucky (two queries), so
    fusion's nested figure is below its train figure; pairwise, whose base is that point chosen on every train query,
    must score what fusion scores nested, not fusion's train figure (the HotpotQA case: 0.9290 vs 0.9218)."""
    steady = {"a": 0.6, "b": 0.6, "c": 0.6, "d": 0.6}
    lucky = {"a": 1.0, "b": 1.0, "c": 0.2, "d": 0.3}
    folds = [["a"], ["b"], ["c"], ["d"]]
    fusion_points = [{"c": 60, "members": {"learned": {}}}, {"c": 1, "members": {"learned": {}}}]
    choices = FoldChoices(folds)
    choices.add("fusion", fusion_points, [steady, lucky])
    assert choices.chosen_without("fusion", 0) == fusion_points[0]          # without a: steady (0.6 vs 0.5)
    assert choices.chosen_without("fusion", 2) == fusion_points[1]          # without c: lucky (0.767 vs 0.6)
    runs = []

    def run(params):                                                        # pairwise at 0/0 = its base's ranking
        runs.append(params)
        return steady if params["base"]["fusion"]["c"] == 60 else lucky

    chosen = fusion_points[1]                                              # the best train figure: lucky, 0.625
    choices.add("pairwise", [{"coverage_weight": 0.0, "base": {"fusion": chosen}}], [lucky])
    figure = choices.nested("pairwise", run)
    assert figure == pytest.approx(nested_scores([steady, lucky], folds))  # = fusion's own nested figure
    assert sum(figure.values()) / 4 < sum(lucky.values()) / 4
    assert len(runs) == 2                            # folds a, b moved the base and re-ran; c, d kept the run
    assert choices.at_fold({"members": {"learned": {"m": 1}, "fusion": chosen}}, 0) == \
        {"members": {"learned": {"m": 1}, "fusion": fusion_points[0]}}     # a retriever not searched is kept


def test_cv_groups_chooses_what_a_fold_keeps_together():
    bench = Benchmark("b", "train", {"q1": "a", "q2": "b"}, {"q1": {"d": 1.0}, "q2": {"d": 1.0}})
    assert fold_groups(TuningSpec(), bench) is bench.qrels                      # default: shared documents
    assert fold_groups(TuningSpec(cv_groups="queries"), bench) is None
    with pytest.raises(ValueError, match="cv_groups"):
        TuningSpec(cv_groups="documents")


def test_against_default_says_when_the_default_cannot_check_the_winner():
    from causal_assets.core.tuning.selection import _against_default

    best = {"hybrid": {"selectable": True}, "learned": {"selectable": True}}
    figures = {"hybrid": {"a": 0.5, "b": 0.6}}
    chosen, note = _against_default(best, figures, "hybrid", "learned")           # the default was not tuned
    assert chosen == "hybrid" and "was not tuned here" in note
    chosen, note = _against_default(best, {"learned": {"a": 0.5}}, "learned", "learned")
    assert chosen == "learned" and note == "`learned` selected, the only retriever tuned"
    best["learned"]["selectable"] = False                                           # a default not selectable
    assert _against_default(best, {**figures, "learned": {"a": 0.9}}, "hybrid", "learned")[0] == "hybrid"
