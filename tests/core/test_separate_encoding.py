"""Documents encoded each on its own (`monte_carlo.document_encoding: separate`): the prompt's cuts, the request's
checks, and the in-process llama.cpp mechanism on the real model -- values that depend on nothing but their own
request, a document's state computed once per question, and the documents put at the right positions."""
from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from causal_assets.core.corpus.multihop import read_multihop
from causal_assets.core.labeling.runner import LabelingParams
from causal_assets.core.labeling.solver import (LikelihoodSolver, answer_continuations, document_cuts,
                                                question_span, solver_prompt)
from causal_assets.core.labeling.trials import run_trials
from causal_assets.core.llm import separate
from causal_assets.core.llm.logits import log_softmax_at
from causal_assets.core.llm.models import local_scorer
from causal_assets.core.llm.scoring import EndpointScorer, ScoreRequest
from causal_assets.core.llm.client import LLMClient
from tests.conftest import HOTPOT, require
from tests.core.conftest import with_cache

DOCS = [("Alpha", "Alpha is a river in Norway."), ("Beta [2]", "Beta flows\n\ninto the sea."), ("Gamma", "G.")]


@pytest.mark.unit
@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_cuts_put_each_document_in_a_piece_of_its_own(k):
    docs = DOCS[:k]
    prompt = solver_prompt("Where is Alpha?", docs, "answer_f1")
    cuts = document_cuts(docs)
    pieces = [prompt[a:b] for a, b in zip(cuts, cuts[1:])]
    assert pieces[0::2] == [f" {t}\n{x}" for t, x in docs]          # each document with its title
    assert pieces[1::2] == [f"\n\n[{i}]" for i in range(2, k + 1)]  # the numbers between them
    assert prompt[:cuts[0]].endswith("Context documents:\n[1]")
    assert prompt[cuts[-1]:].startswith("\n\nQuestion: Where is Alpha?")
    ScoreRequest(prompt, (" Norway",), question_span("Where is Alpha?", docs), cuts)   # a valid request


@pytest.mark.unit
def test_no_documents_no_cuts():
    assert document_cuts([]) is None


@pytest.mark.unit
@pytest.mark.parametrize("pieces, span, match", [
    ((5,), None, "increasing"), ((0, 5), None, "increasing"), ((5, 5), None, "increasing"),
    ((5, 3), None, "increasing"), ((5, 20), None, "increasing"), ((2, 6), (4, 8), "after the last piece")])
def test_a_request_with_bad_pieces_is_refused(pieces, span, match):
    with pytest.raises(ValueError, match=match):
        ScoreRequest("0123456789ab", (" x",), span, pieces)


@pytest.mark.unit
def test_separate_encoding_needs_a_scorer_that_does_it():
    """Refused before any call: an endpoint scores whole prompts, whatever the request says."""
    pools = _pools()
    scorer = EndpointScorer(LLMClient("http://127.0.0.1:9/v1", "m", max_retries=0), "m", mode="echo")
    with pytest.raises(ValueError, match="document_encoding: separate needs the in-process"):
        run_trials(pools, LabelingParams(document_encoding="separate"), "b", "answer_f1", "m", scorer=scorer)
    with pytest.raises(ValueError, match="document_encoding must be one of"):
        LabelingParams(document_encoding="parallel")
    assert not LabelingParams(document_encoding="auto").separate_documents(scorer)   # auto: joint here


def _pools():
    import pandas as pd
    return pd.DataFrame({"query_id": ["q"] * 3, "position": [0, 1, 2], "chunk_id": ["a", "b", "c"],
                         "title": [t for t, _ in DOCS], "text": [x for _, x in DOCS], "question": ["Where?"] * 3,
                         "answer": ["Norway"] * 3, "aliases": ["[]"] * 3})


@pytest.fixture(scope="module")
def question():
    return read_multihop(require(HOTPOT)).questions[0]


def _requests(q, subsets, separate=True):
    cont = answer_continuations(q.answer)
    return [ScoreRequest(solver_prompt(q.question, s, "answer_f1"), cont, question_span(q.question, s),
                         document_cuts(s) if separate else None) for s in subsets]


@pytest.mark.llm
def test_a_value_depends_only_on_its_own_request_and_documents_are_encoded_once(scorer, question):
    """Scored together (documents' states reused across prompts) or each by a scorer that has seen nothing: the
    same bits. Together, a document is evaluated once and later prompts pay only for the question and answer."""
    q = question
    docs = [(p.title, p.text[:150]) for p in q.paragraphs][:6]
    subsets = [docs[:3], docs[::2], docs[3:], [docs[4], docs[1]], docs[:1]]
    reqs = _requests(q, subsets)
    s = with_cache(scorer, None)
    s._meter = None
    s._separate = None                       # a fresh encoder: nothing cached
    together = s.score_many(reqs)
    # every distinct piece evaluated once; each prompt's prefix and pieces never again
    pieces = {r.prompt[a:b] for r in reqs for a, b in zip(r.pieces, r.pieces[1:])}
    once = sum(len(s.tokenize(p, False)) for p in pieces) + len(s.tokenize(reqs[0].prompt[:reqs[0].pieces[0]], True))
    tails = sum(len(s.tokenize(r.prompt[r.pieces[-1]:], False)) + sum(len(s.tokenize(c, False)) - 1
                                                                      for c in r.continuations) for r in reqs)
    assert sum(r.evaluated_tokens for r in together) == once + tails
    alone = []
    for r in reqs:
        s._separate = None
        alone.append(s.score_many([r])[0])
    assert [r.logprobs for r in together] == [r.logprobs for r in alone]
    assert [r.span_logprob for r in together] == [r.span_logprob for r in alone]


@pytest.mark.llm
def test_documents_sit_at_their_positions(scorer, question, monkeypatch):
    """What a prompt reads is its documents' own states at their positions. One document: the same bits as the
    prompt evaluated as one sequence in the same batches (nothing is shifted, the state copy is exact). Several:
    each document's cells, as they join the prompt, span exactly the positions the prompt gives it, one after the
    other from the prefix's end. (Bit-equality with a differently laid-out KV cache is not to be had: this model's
    log-probabilities move by tenths of a nat with the kernels' summation order.)"""
    q = question
    docs = [(p.title, p.text[:120]) for p in q.paragraphs][:3]
    s = with_cache(scorer, None)
    s._meter = None
    one, three = _requests(q, [docs[:1], docs])
    got_one = s.score_many([one])[0]
    enc = s._separate
    target = s.tokenize(one.continuations[0], False)

    def parts(req):
        c = req.pieces
        return (s.tokenize(req.prompt[:c[0]], True), [s.tokenize(req.prompt[a:b], False) for a, b in zip(c, c[1:])],
                s.tokenize(req.prompt[c[-1]:], False))

    prefix, [piece], suffix = parts(one)
    llama_cpp.llama_memory_clear(enc._mem, True)
    enc._prefix, enc._bytes = [], 0                             # the encoder starts over after this
    enc._pieces.clear()
    enc._decode(prefix, 0, 0, set())
    enc._decode(piece, len(prefix), 0, set())
    at = len(prefix) + len(piece)
    last = enc._decode(suffix, at, 0, {len(suffix) - 1})[len(suffix) - 1]
    rest = enc._decode(target[:-1], at + len(suffix), 0, set(range(len(target) - 1)))
    llama_cpp.llama_memory_clear(enc._mem, True)
    assert got_one.logprobs[0] == log_softmax_at(last, target[0]) + sum(
        log_softmax_at(rest[j], t) for j, t in enumerate(target[1:]))

    spans = []
    copy = llama_cpp.llama_memory_seq_cp

    def recording(mem, src, dst, p0, p1):
        if (src, dst) == (separate.TEMP, separate.PROMPT):
            spans.append((llama_cpp.llama_memory_seq_pos_min(mem, src), llama_cpp.llama_memory_seq_pos_max(mem, src)))
        return copy(mem, src, dst, p0, p1)

    monkeypatch.setattr(llama_cpp, "llama_memory_seq_cp", recording)
    s.score_many([three])
    prefix, pieces, _ = parts(three)
    starts = np.cumsum([len(prefix)] + [len(p) for p in pieces])
    assert spans == [(int(a), int(b) - 1) for a, b in zip(starts, starts[1:])]


@pytest.mark.llm
def test_the_answer_is_likelier_with_its_paragraphs_read_separately(scorer, question):
    q = question
    gold = [(p.title, p.text[:200]) for p in q.paragraphs if p.supporting]
    distractors = [(p.title, p.text[:200]) for p in q.paragraphs if not p.supporting][:3]
    with_gold, without = with_cache(scorer, None).score_many(_requests(q, [distractors + gold, distractors]))
    assert with_gold.best > without.best + 1.0, (q.answer, with_gold.best, without.best)


@pytest.mark.llm
def test_loading_the_model_and_encoding_separately_write_nothing_on_stderr(models_dir, question, capfd):
    """llama.cpp's notes on its caches (the binding lets its warnings through even when not verbose) are not for a
    user who runs `label`: a new scorer and a new separate context print nothing."""
    capfd.readouterr()
    s = local_scorer("gemma3-270m", None, models_dir)
    try:
        s.score_many(_requests(question, [[(p.title, p.text[:80]) for p in question.paragraphs][:2]]))
        assert s._separate is not None
    finally:
        s.close()
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
