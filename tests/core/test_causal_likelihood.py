"""The causal retriever measured with the real local model's log-probabilities (`answer_model: likelihood`):
question surprisal as the information contribution, the answer's probability with and without a
document as the counterfactual impact, every request through the call cache. Gemma-3-270M scores in-process."""
from __future__ import annotations

import math
import os

import pytest

from causal_assets.core.llm import CallCache
from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.corpus.multihop import read_multihop
from causal_assets.core.retrievers.causal.answer_model import LexicalAnswerModel
from causal_assets.core.retrievers.causal.documents import ContextDoc
from causal_assets.core.retrievers.causal.likelihood_model import LikelihoodAnswerModel
from causal_assets.core.retrievers.causal.retriever import CausalRetriever
from causal_assets.core.retrievers.factory import build_causal
from causal_assets.core.tuning.search import tune
from causal_assets.core.registry.tuning import TuningSpec
from tests.conftest import HOTPOT, require
from tests.core.conftest import with_cache
from tests.core.test_causal_retriever import (BUG_QUERY, CART, DOCS, SHOP, TIMEOUT_QUERY, _cart_ts, _retriever,
                                              _write)

pytestmark = pytest.mark.llm


def test_the_question_and_its_answer_get_likelier_with_the_supporting_paragraphs(scorer):
    q = read_multihop(require(HOTPOT)).questions[0]
    # each paragraph's first 200 characters (both gold ones name the band there); greedy answers of up to 8 tokens
    # (the answer, "Rush", is one)
    gold = [ContextDoc(f"g{i}", p.text[:200], p.title) for i, p in enumerate(p for p in q.paragraphs if p.supporting)]
    other = [ContextDoc(f"d{i}", p.text[:200], p.title)
             for i, p in enumerate(p for p in q.paragraphs if not p.supporting)][:2]
    model = LikelihoodAnswerModel(scorer, max_answer_tokens=8)
    assert model.estimate_entropy(q.question, gold) < model.estimate_entropy(q.question, []) - 5
    assert model.answer_probability(q.question, gold, q.answer) > 2 * model.answer_probability(q.question, other,
                                                                                              q.answer)
    assert model.answer_probability(q.question, gold, "  ") == 0.0
    answer = model.answer(q.question, gold)
    assert answer and "\n" not in answer
    dist = model.answer_distribution(q.question, gold)
    assert math.isclose(sum(dist.values()), 1.0) and all(0 <= p <= 1 for p in dist.values())


def test_the_answer_is_generated_up_to_the_end_of_its_line(scorer, tmp_path):
    """Generation stops with the answer's line: the completion the model produced (journalled in the call cache)
    is that line, not `max_answer_tokens` of the lines a base model goes on with after it."""
    q = read_multihop(require(HOTPOT)).questions[0]
    gold = [ContextDoc(f"g{i}", p.text[:200], p.title) for i, p in enumerate(p for p in q.paragraphs if p.supporting)]
    with CallCache(tmp_path / "calls.sqlite") as cache:
        answer = LikelihoodAnswerModel(with_cache(scorer, cache)).answer(q.question, gold)
        completions = [c for c in cache.history() if c.request.get("kind") == "complete"]
    assert answer and completions and completions[-1].response["text"].strip() == answer
    assert all("\n" not in c.response["text"] and c.request["max_tokens"] == 24 for c in completions), completions


@pytest.mark.slow
def test_counterfactual_is_the_share_of_the_answer_probability_a_document_carries(scorer, tmp_path):
    docs = _retriever(_write(tmp_path, DOCS), "docs", LikelihoodAnswerModel(scorer), diversity_threshold=0.0)
    res = docs.retrieve(TIMEOUT_QUERY)
    cands = res.metadata["candidates"]
    answer = res.metadata["answer"]
    model = docs.answer_model
    full = docs._docs(cands)
    for cid in cands:
        cf = res.metadata["relevance"][cid].counterfactual_impact
        without = docs._docs([c for c in cands if c != cid])
        ratio = model.answer_probability(TIMEOUT_QUERY, without, answer) / model.answer_probability(
            TIMEOUT_QUERY, full, answer)
        assert cf.change_prob == pytest.approx(min(1.0, max(0.0, 1.0 - ratio)))
        assert cf.answer_with == answer
        ic = res.metadata["relevance"][cid].information_contribution
        assert ic.mutual_information == pytest.approx(ic.base_entropy - ic.with_doc_entropy)
    # the timeout sentence (in a.md and b.md) makes the question likelier and ranks first
    rel = res.metadata["relevance"]
    assert {"a.md#0", "b.md#0"} <= set(rel)
    assert all(rel[c].information_contribution.mutual_information > 1.0 for c in ("a.md#0", "b.md#0"))
    assert res.documents[0].document.chunk_id in ("a.md#0", "b.md#0")
    assert "surprisal" in res.documents[0].explanation
    calls = scorer.cache.stats()["calls"]
    again = docs.retrieve(TIMEOUT_QUERY)                        # everything from the call cache now
    assert scorer.cache.stats()["calls"] == calls
    assert [d.document.chunk_id for d in again.documents] == [d.document.chunk_id for d in res.documents]


def test_factory_builds_the_likelihood_model_only_with_a_scorer(scorer, tmp_path):
    docs = _retriever(_write(tmp_path, DOCS), "docs")
    with pytest.raises(ValueError, match="needs a log-probability scorer"):
        build_causal(docs.index, {"answer_model": "likelihood", "shortlist": "bm25"})
    built = build_causal(docs.index, {"answer_model": "likelihood", "shortlist": "bm25",
                                      "answer_model_params": {"max_doc_chars": 200}}, scorer=scorer)
    assert isinstance(built, CausalRetriever) and built.answer_model.max_doc_chars == 200


def test_the_llm_likelihood_is_the_answer_model_wherever_a_scorer_is_configured(scorer, tmp_path):
    """With an LLM that scores prompts (the default local one included) the causal retriever is built and
    tuned with the answer likelihood; the lexical model is the fallback without one, or when a config names it."""
    docs = _retriever(_write(tmp_path, DOCS), "docs")
    assert isinstance(build_causal(docs.index, {"shortlist": "bm25"}, scorer=scorer).answer_model,
                      LikelihoodAnswerModel)
    assert isinstance(build_causal(docs.index, {"shortlist": "bm25"}).answer_model, LexicalAnswerModel)
    assert isinstance(build_causal(docs.index, {"shortlist": "bm25", "answer_model": "lexical"},
                                   scorer=scorer).answer_model, LexicalAnswerModel)
    bench = Benchmark("docs", "train", {"q1": TIMEOUT_QUERY}, {"q1": {"a.md#0": 1.0, "b.md#0": 1.0}})
    spec = TuningSpec(retrievers=["causal"], spaces={"causal": {"shortlist": ["bm25"], "min_relevance": [0.0, 0.1]}})
    listed = {"causal": {"shortlist": "bm25"}}
    logged: list[str] = []
    measured = tune(docs.index, bench, spec, listed, graph=None, scorer=lambda: scorer, log=logged.append)
    chosen = measured.best["causal"]["params"]
    # its nested figure pays for both searches' choices (the candidate settings too), not the second's alone
    assert any(m.startswith("causal: nested") and m.endswith("over both searches") for m in logged)
    assert 0.0 <= measured.best["causal"]["selection_value"] <= 1.0
    assert chosen["answer_model"] == "likelihood" and chosen["diversity_threshold"] == 0.0
    # candidates first with the lexical model over the whole space, then the LLM's measures weighed on them
    by_model = measured.trials.assign(llm=measured.trials["params"].str.contains('"answer_model": "likelihood"'))
    assert list(by_model["llm"]) == sorted(by_model["llm"]) and by_model["llm"].any() and not by_model["llm"].all()
    assert by_model[by_model["llm"]]["evaluation"].str.endswith("answer likelihood on those candidates").all()
    assert by_model[by_model["llm"]]["best"].sum() == 1
    fallback = tune(docs.index, bench, spec, listed, graph=None)
    assert fallback.best["causal"]["params"]["answer_model"] == "lexical"


# Measured with Gemma-3-270M on the shop scenario, whole chunks (max_doc_chars 3000; at the default 400 the
# calculateTotal chunk is cut before its body): the answer with every candidate is "Because the cart is not a valid
# item."; src/tests/cart.test.ts 0.80 (question surprisal -33.2 bits, counterfactual 0.67: without it the answer
# becomes "Because the value of the item is NaN.") > src/cart.ts#1 0.71 (-30.1 bits, counterfactual 0.44) >
# docs/api.md 0.58 (-37.2 bits, counterfactual 0.00). A 270M model does not read the arithmetic on line 45 as the
# cause; SmolLM2-135M gives an empty answer to this prompt. A larger model behind `base_url` is what can find it.
SHOP_LIKELIHOOD = ("Gemma-3-270M answer likelihood: src/tests/cart.test.ts 0.80 > src/cart.ts#1 0.71 > docs/api.md "
                   "0.58; its answer 'Because the cart is not a valid item.' does not name the cause")


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("CAUSAL_ASSETS_LLM_BASE_URL"),
                    reason="opt-in (CAUSAL_ASSETS_LLM_BASE_URL, docs/configuration.md): needs a model stronger than the packaged "
                           "ones; "
                           + SHOP_LIKELIHOOD)
def test_shop_cause_ranked_first_by_answer_likelihood(tmp_path):
    """A model's capacity, not the product's: with a model behind an endpoint the causal retriever must rank the
    line that causes the bug first (the packaged 270M model's scores are above, and in the Results page)."""
    from causal_assets.resources import LLM

    root = _write(tmp_path, {**SHOP, "src/cart.ts": _cart_ts()})
    shop = _retriever(root, "shop", LikelihoodAnswerModel(LLM().scorer(), max_doc_chars=3000))
    res = shop.retrieve(BUG_QUERY)
    print({c: round(r.relevance_score, 3) for c, r in res.metadata["relevance"].items()}, res.metadata["answer"])
    assert res.documents[0].document.chunk_id == CART
