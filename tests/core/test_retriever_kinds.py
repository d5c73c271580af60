"""The table of retriever kinds: every entry is whole, and what reads it (factory, tuner, evaluation) finds what it
names."""
from __future__ import annotations

import pytest

from causal_assets.core.registry.retrievers import (COMBINATIONS, INGREDIENTS, KINDS, NEEDS, SCORES, TUNABLE, TUNINGS,
                                                 ingredients, kind, may_need)


def test_every_kind_names_a_builder_the_factory_has():
    for k in KINDS.values():
        assert callable(k.builder_function()), k.name


def test_every_field_takes_one_of_its_documented_values():
    for k in KINDS.values():
        assert k.needs <= set(NEEDS), k.name
        assert k.ingredients in (None, *INGREDIENTS) and k.scores in (None, *SCORES), k.name
        assert k.tuning in (None, *TUNINGS), k.name
        assert set(k.start) <= set(k.space), k.name          # the start point is a point of the space
        assert all(k.start[p] in k.space[p] for p in k.start), k.name


def test_every_tuning_strategy_exists_and_each_kind_is_tuned_after_what_it_is_built_on():
    from causal_assets.core.tuning.search import STRATEGIES

    assert {KINDS[n].tuning for n in TUNABLE} <= set(STRATEGIES)
    order = list(TUNABLE)
    # the causal shortlist and the combinations' defaults (`TuningSpec`) are tuned before them
    for name, built_on in (("causal", "learned"), ("fusion", "learned"), ("pairwise", "fusion"),
                           ("query_likelihood", "fusion"), ("learned", "hybrid")):
        assert order.index(built_on) < order.index(name)


def test_ingredients_are_read_from_the_params_the_kind_declares():
    assert ingredients("fusion", {"members": {"learned": {}, "hybrid": {}}}) == ["learned", "hybrid"]
    assert ingredients("pairwise", {"base": {"fusion": {}}}) == ["fusion"]
    assert ingredients("causal", {"shortlist": "learned"}) == ["learned"]
    assert ingredients("hybrid", {"weight": 0.5}) == []
    assert set(COMBINATIONS) == {"fusion", "pairwise", "query_likelihood", "cross_encoder"}
    assert may_need("fusion") >= {"embeddings", "neighbors", "graph"} and may_need("bm25") == frozenset()


def test_an_unknown_kind_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown retriever 'bm52'; known: bm25, tfidf"):
        kind("bm52")
