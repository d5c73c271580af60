"""A retriever's params outside their bounds are refused when the benchmark registry loads (`retrievers:`), in one
line naming the file, the entry, the field and the value; the bounds name only params the retrievers take, and
every value the tuner searches is within them."""
from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from causal_assets.core.foundation.errors import ConfigError
from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.retriever_params import params_problem
from causal_assets.core.registry.retrievers import KINDS
from tests.core.test_registry_refusals import HOTPOT, _write


@pytest.mark.parametrize("retrievers, field, message", [
    ({"hybrid": {"weight": 1.5}}, "hybrid.weight", r"must be a number in \[0, 1\] \(value: 1.5\)"),
    ({"hybrid": {"weight": "0.5"}}, "hybrid.weight", r"must be a number in \[0, 1\] \(value: '0.5'\)"),
    ({"rrf": {"depth": 0}}, "rrf.depth", r"must be a whole number from 1 to 10,000 \(value: 0\)"),
    ({"rrf": {"depth": 20.0}}, "rrf.depth", r"must be a whole number from 1 to 10,000 \(value: 20.0\)"),
    ({"rrf": {"c": -1}}, "rrf.c", r"must be a number from 0 to 10,000 \(value: -1\)"),
    ({"entity_first": {"k": True}}, "entity_first.k", r"must be a whole number from 1 to 1,000 \(value: True\)"),
    ({"entity_first": {"title_match": {"entity": 3}}}, "entity_first.title_match.entity", r"in \[0, 1\]"),
    ({"cascade": {"graph": {"max_hops": 10**6}}}, "cascade.graph.max_hops", r"from 0 to 100 \(value: 1000000\)"),
    ({"cascade": {"tfidf": {"initial_k": 10**9}}}, "cascade.tfidf.initial_k", r"from 1 to 10,000"),
    ({"fusion": {"members": {"bm25": {}, "hybrid": {"weight": -0.1}}}}, "fusion.members.hybrid.weight",
     r"in \[0, 1\] \(value: -0.1\)"),
    ({"fusion": {"members": {"bm25": {}}, "weights": {"bm25": 10**4}}}, "fusion.weights.bm25", r"from 0 to 1,000"),
    ({"fusion": {"members": ["bm25"]}}, "fusion.members", r"must be a mapping \{retriever name: its params\}"),
    ({"pairwise": {"base": {"bm25": {}}, "pool": 1}}, "pairwise.pool", r"from 2 to 1,000 \(value: 1\)"),
    ({"query_likelihood": {"base": {"rrf": {"depth": -5}}}}, "query_likelihood.base.rrf.depth", r"\(value: -5\)"),
    ({"causal": {"weights": {"counterfactual_impact": 2}}}, "causal.weights.counterfactual_impact", r"in \[0, 1\]"),
    ({"causal": {"shortlist_params": {"weight": 7}}}, "causal.shortlist_params.weight", r"in \[0, 1\] \(value: 7\)"),
    ({"causal": {"shortlist": "tfidf"}}, "causal.shortlist", r"unknown shortlist 'tfidf'; known: bm25, hybrid"),
    ({"cross_encoder": {"base": {"bm25": {}}, "max_length": 4}}, "cross_encoder.max_length", r"from 8 to 100,000"),
    ({"bm52": {}}, "bm52", r"unknown retriever 'bm52'; known: bm25, tfidf, dense"),
])
def test_a_retriever_param_outside_its_bound_is_refused_when_the_registry_loads(tmp_path, retrievers, field, message):
    """`hybrid: {weight: 7}` ranked by seven times the dense score minus six times BM25's, `rrf: {depth: 0}` fused
    empty rankings, and a depth of 10**9 or a typo'd retriever failed only once the evaluation ran: each is one line
    now, before any run."""
    path = _write(tmp_path, {**HOTPOT, "retrievers": {"bm25": {}, **retrievers}})
    with pytest.raises(ConfigError) as caught:
        load_benchmark_registry(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: benchmarks[0].retrievers.{field}: "), text
    assert text.endswith("(entry 'hotmini')") and "\n" not in text, text
    assert re.search(message, text), text


def test_params_within_their_bounds_load_as_written(tmp_path):
    retrievers = {"hybrid": {"weight": 0.0}, "rrf": {"c": 0, "depth": 10_000},
                  "cascade": {"embedding": {"similarity_cutoff": None}, "graph": {"max_hops": 0}},
                  "fusion": {"members": {"bm25": {}, "hybrid": {"weight": 1}}, "weights": {"hybrid": 2.5}},
                  "causal": {"shortlist": "learned", "shortlist_params": {"depth": None}},
                  "cross_encoder": {"base": {"hybrid": {"weight": 0.65}}, "weight": 2.0, "depth": 20}}
    spec = load_benchmark_registry(_write(tmp_path, {**HOTPOT, "retrievers": retrievers}))["hotmini"]
    assert spec.retrievers == retrievers


def _takes(name: str) -> set[str]:
    """The params a `name` retriever takes (its class's fields or keyword arguments; cascade's sections)."""
    from causal_assets.core.retrievers import cascade_config, cross_encoder, fusion, query_likelihood, similarity
    from causal_assets.core.retrievers.causal.results import CausalRetrievalOptions, RelevanceWeights
    from causal_assets.core.retrievers.entity_first.retriever import EntityFirstRetriever
    from causal_assets.core.retrievers.learned.retriever import LearnedRetriever

    if name == "cascade":
        return {f"{section}.{field}" for section, info in cascade_config.RetrievalConfig.model_fields.items()
                for field in info.annotation.model_fields}
    if name == "causal":
        return {f.name for f in dataclasses.fields(CausalRetrievalOptions)} | \
            {f"weights.{w}" for w in RelevanceWeights.FIELDS}
    target = {"hybrid": similarity.HybridRetriever, "rrf": similarity.RRFRetriever,
              "entity_first": EntityFirstRetriever, "learned": LearnedRetriever, "fusion": fusion.FusionRetriever,
              "pairwise": fusion.PairwiseTop2, "query_likelihood": query_likelihood.QueryLikelihoodReranker,
              "cross_encoder": cross_encoder.CrossEncoderReranker}[name]
    return set(inspect.signature(target).parameters)


@pytest.mark.parametrize("name", sorted(n for n, k in KINDS.items() if k.bounds))
def test_the_bounds_name_params_the_retriever_takes(name):
    taken = _takes(name)
    for dotted in KINDS[name].bounds:
        assert dotted.removesuffix(".*") in taken or dotted in taken, (name, dotted, sorted(taken))


@pytest.mark.parametrize("name", [n for n, k in KINDS.items() if k.space])
def test_every_value_the_tuner_searches_is_within_the_bounds(name):
    kind = KINDS[name]
    for dotted, values in kind.space.items():
        for value in values:
            params: dict = {}
            *sections, last = dotted.split(".")
            inner = params
            for section in sections:
                inner = inner.setdefault(section, {})
            inner[last] = value
            assert params_problem(name, params) is None, (name, dotted, value)
    assert params_problem(name, {}) is None
