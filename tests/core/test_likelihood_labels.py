"""Graded Monte Carlo outcomes: the gold answer's log-probability given a subset, from the real local model
(in-process llama.cpp and the real llama.cpp server), the estimator on a continuous outcome, the call cache, and
an endpoint that cannot score."""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from typing import Iterator

import numpy as np
import openai
import pandas as pd
import pytest

from causal_assets.core.corpus.multihop import read_multihop
from causal_assets.core.outputs.checks import check_labels
from causal_assets.core.labeling.design import balanced_design
from causal_assets.core.labeling.adaptive import AdaptiveLabeler
from causal_assets.core.labeling.estimators import YES, regression
from causal_assets.core.labeling.runner import LabelingParams, label_question, label_table
from causal_assets.core.labeling.solver import (LikelihoodSolver, answer_continuations, question_span,
                                                solver_prompt)
from causal_assets.core.llm import cache as llm_cache
from causal_assets.core.llm import scoring
from causal_assets.core.llm.cache import CallCache, file_sha256
from causal_assets.core.llm.client import LLMClient
from causal_assets.core.llm.cores import free_cores
from causal_assets.core.llm.models import local_model_path
from causal_assets.core.llm.scoring import EndpointScorer, LlamaCppScorer, ScoreRequest, ScoringUnsupported
from causal_assets.core.llm.server import LocalLlamaServer
from tests.conftest import HOTPOT, load_scaled_s, require
from tests.core.conftest import with_cache
from tests.helpers.endpoint import chat_only

# One Gemma-3-270M for the module (the `scorer` fixture, loaded once); a test that needs its own call cache, or none,
# scores through `with_cache(scorer, ...)`: the same model behind that cache.
pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def hotpot_question():
    q = read_multihop(require(HOTPOT)).questions[0]
    return q


def test_known_answer_gets_likelier_with_its_paragraph(tmp_path, scorer, hotpot_question):
    q = hotpot_question
    scorer = with_cache(scorer, CallCache(tmp_path / "c.db"))
    # each paragraph's first 200 characters: both gold ones name the band there
    gold = [(p.title, p.text[:200]) for p in q.paragraphs if p.supporting]
    distractors = [(p.title, p.text[:200]) for p in q.paragraphs if not p.supporting][:3]
    cont = answer_continuations(q.answer)
    with_gold, without = scorer.score_many([ScoreRequest(solver_prompt(q.question, distractors + gold, "answer_f1"), cont),
                                            ScoreRequest(solver_prompt(q.question, distractors, "answer_f1"), cont)])
    assert with_gold.best > without.best + 1.0, (q.answer, with_gold.best, without.best)
    assert not with_gold.cached and with_gold.prompt_tokens > 100


@pytest.mark.slow
def test_prefix_reuse_gives_the_same_log_probabilities_bit_for_bit(scorer, hotpot_question):
    """Scoring with the KV cache of a previous prompt reused equals scoring from scratch, to the last bit: the
    reuse is in whole blocks and the batches are aligned to them, so no token's batch depends on the request
    before it (free-form reuse moved 54 of 120 such answer scorings by up to 0.53 nats:
    docs/decisions.md). Monte Carlo-like subsets of one question's paragraphs, scored in one batch
    and then each alone. In the batch's (prompt) order each shares a beginning of another length with the one
    before it (none, 133, 157, 303 and 75 tokens): reuse of no block, one and two blocks, each with a part-block
    after it that must be evaluated again, and a shared beginning shorter than a block."""
    q = hotpot_question
    docs = [(p.title, p.text[:60]) for p in q.paragraphs]   # prompts of 2-3 reuse blocks
    cont = answer_continuations(q.answer)
    subsets = [docs[:k] for k in (10, 9, 4)] + [docs[::2], docs[:3] + docs[5:8]]
    reqs = [ScoreRequest(solver_prompt(q.question, sub, "answer_f1"), cont, question_span(q.question, sub))
            for sub in subsets]
    scorer = with_cache(scorer, None)                            # no cache: every request is evaluated
    scorer._meter = None                                         # its threads stay as they are for the comparison
    scorer.forget_prefix()                                       # as a fresh model: no earlier prompt to reuse
    evaluated, requested = scorer.tokens_evaluated, scorer.tokens_requested
    with _recording_batches(scorer) as decoded:
        together = scorer.score_many(reqs)
        # shared beginnings were not evaluated twice
        assert scorer.tokens_evaluated - evaluated < scorer.tokens_requested - requested
        batches_together = list(decoded)
        decoded.clear()
        alone = []
        for r in reqs:
            scorer.forget_prefix()                               # from scratch
            alone.append(scorer.score_many([r])[0])
    # The mechanism, checked on any CPU: every batch decoded with reuse (its first position and its tokens) is one
    # that scoring from scratch decodes too. Free-form reuse (`reuse_block=0`) decoded none of its 5 batches as
    # scratch does: 4 start at positions scratch never starts a batch at (75, 133, 157, 303), the first spans two
    # blocks (here it also moved one answer's log-probability, by 0.04 nats). Whether that also moves a
    # log-probability depends on the CPU's kernels and the prompts, so the equalities below alone are not a
    # detector everywhere.
    assert [b for b in batches_together if b not in set(decoded)] == []
    assert [r.logprobs for r in together] == [r.logprobs for r in alone]
    assert [r.span_logprob for r in together] == [r.span_logprob for r in alone]


@contextlib.contextmanager
def _recording_batches(scorer: LlamaCppScorer) -> Iterator[list[tuple[int, tuple[int, ...]]]]:
    """Every batch the scorer's llama.cpp context decodes inside the block, as (first position, tokens)."""
    decoded: list[tuple[int, tuple[int, ...]]] = []
    context = scorer._llm._ctx
    decode = context.decode

    def recording(batch):
        b = batch.batch
        decoded.append((b.pos[0], tuple(b.token[i] for i in range(b.n_tokens))))
        return decode(batch)

    context.decode = recording
    try:
        yield decoded
    finally:
        context.decode = decode                                  # the model is the module's: stop recording


def test_the_reuse_block_is_checked(models_dir):
    with pytest.raises(ValueError, match="reuse_block"):
        LlamaCppScorer(local_model_path("gemma3-270m", models_dir), "local/gemma3-270m", reuse_block=1024)


@pytest.mark.slow
def test_server_endpoint_scores_like_the_in_process_model(tmp_path, scorer, models_dir):
    """The real llama.cpp server's echo + logprobs path agrees with the in-process scorer on the same weights
    (Gemma: prompts start with BOS, the case llama-cpp-python's server echoes correctly), and reads the question's
    span off the same echo. One sentence, the question and the answer cue, without the solver prompt's
    instructions (19 prompt tokens, not 69): llama-cpp-python's server sorts the whole vocabulary (262k for Gemma) in
    Python for every echoed token, ~0.4 s a token on 2 cores."""
    question = "Which band is Canadian?"
    prompt = f"Rush is a Canadian rock band.\n\nQuestion: {question}\nAnswer:"
    start = prompt.index(" " + question)
    span, cont = (start, start + 1 + len(question)), (" Rush",)
    local = with_cache(scorer, None).score_many([ScoreRequest(prompt, cont, span)])[0]
    with LocalLlamaServer(model_path=local_model_path("gemma3-270m", models_dir), n_threads=free_cores(), n_ctx=512,
                          startup_timeout_s=load_scaled_s(120)) as srv:
        # the client's deadline follows the machine's load: the product's behaviour is asserted, not its speed
        client = LLMClient(srv.base_url, srv.alias, timeout_s=load_scaled_s(120), max_retries=0)
        remote = EndpointScorer(client, srv.alias, CallCache(tmp_path / "c.db"), mode="echo") \
            .score_many([ScoreRequest(prompt, cont, span)])[0]
    assert not isinstance(remote, Exception), f"the server's echo call failed: {remote}"
    assert remote.n_tokens == local.n_tokens
    assert abs(remote.best - local.best) < 0.05, (remote.best, local.best)
    assert remote.span_tokens == local.span_tokens > 3
    assert remote.span_logprob == pytest.approx(local.span_logprob, abs=0.1)


@pytest.mark.slow
def test_question_span_is_read_off_the_answers_prompt_evaluation(tmp_path, scorer, hotpot_question):
    """qa_likelihood costs one request per trial: the question's log-probability read off the answer's prompt
    equals scoring the question as a continuation of the prompt before it (a separate request). The real
    server's echo path reads the same span: `test_server_endpoint_scores_like_the_in_process_model`, on a short
    prompt (the server's echo costs ~0.4 s a prompt token here)."""
    q = hotpot_question
    docs = [(p.title, p.text[:200]) for p in q.paragraphs[:3]]
    prompt, span = solver_prompt(q.question, docs, "answer_f1"), question_span(q.question, docs)
    assert prompt[span[0]:span[1]] == " " + q.question
    cont = answer_continuations(q.answer)
    scorer = with_cache(scorer, CallCache(tmp_path / "c.db"))
    one, apart = scorer.score_many([ScoreRequest(prompt, cont, span),
                                    ScoreRequest(prompt[:span[0]], (prompt[span[0]:span[1]],))])
    assert one.span_tokens == apart.n_tokens[0] > 5
    # the two requests batch the prompt differently (prefix reuse), so float sums differ by a few hundredths of a
    # nat over the question's tokens: noise far below the 2-nat label threshold
    assert one.span_logprob == pytest.approx(apart.best, abs=0.1)
    again = scorer.score_many([ScoreRequest(prompt, cont, span)])[0]           # from the cache, span included
    assert again.cached and again.span_logprob == one.span_logprob
    assert scorer.score_many([ScoreRequest(prompt, cont)])[0].span_logprob is None


def test_endpoint_without_prompt_logprobs_raises_the_documented_error(tmp_path):
    with chat_only() as server:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        scorer = EndpointScorer(client, "gpt-chat-only", CallCache(tmp_path / "c.db"))
        with pytest.raises(ScoringUnsupported, match=r"outcome: success"):
            scorer.score_many([ScoreRequest("Question: x\nAnswer:", (" y",))])


@pytest.mark.slow
def test_rerun_is_served_entirely_from_the_cache(tmp_path, scorer, hotpot_question):
    q = hotpot_question
    pool = [(f"{q.query_id}/{i}", p.title, p.text[:60]) for i, p in enumerate(q.paragraphs[:6])]
    cfg = LabelingParams(estimator="regression", outcome="likelihood", budget=8)
    first = label_question(q.query_id, q.question, q.answer, pool,
                           LikelihoodSolver(with_cache(scorer, CallCache(tmp_path / "c.db")), "answer_f1"), cfg)
    # the rerun: the cache's file opened again
    again = label_question(q.query_id, q.question, q.answer, pool,
                           LikelihoodSolver(with_cache(scorer, CallCache(tmp_path / "c.db")), "answer_f1"), cfg)
    assert len(again.trials) == cfg.budget and all(t["cached"] for t in again.trials)
    assert [t["loglik"] for t in again.trials] == [t["loglik"] for t in first.trials]
    assert not any(t["cached"] for t in first.trials)


@pytest.mark.parametrize("estimator", ["regression", "adaptive"])
def test_continuous_outcome_recovers_and_or_structure(estimator):
    """Planted truth on a log-likelihood scale: docs 0 AND 1 together add 3 nats (a two-hop pair), docs 2 OR 3 add
    2 nats (redundant copies), doc 4 adds 1.5 alone; the other five do nothing; Gaussian noise of 0.5 nats."""
    rng = np.random.default_rng(7)

    def outcome(x):
        return (-8.0 + 3.0 * (x[:, 0] & x[:, 1]) + 2.0 * (x[:, 2] | x[:, 3]) + 1.5 * x[:, 4]
                + rng.normal(0, 0.5, len(x)))

    if estimator == "regression":
        x = balanced_design(10, 32, rng)
        res = regression(x, outcome(x), 0.5, interactions=True, max_candidates=5, interaction_z=1.5)
    else:
        lab = AdaptiveLabeler(10, threshold=0.5, budget=32, batch=8, rng=rng)
        while not lab.done:
            s = lab.next_subsets()
            lab.record(s, outcome(s))
        res = lab.labels()
    labels = res.labels()
    assert {d for d, lab in labels.items() if lab == YES} == {0, 1, 2, 3, 4}, labels
    assert all(labels[d] != YES for d in range(5, 10))
    if estimator == "adaptive":
        return   # its later batches hold found documents mostly present, so the contexts are not identified
    ctx = {e.doc: dict(e.context) for e in res.docs}
    assert ctx[0].get(1) is True and ctx[1].get(0) is True      # AND: measured with the partner present
    assert ctx[2].get(3) is False and ctx[3].get(2) is False    # OR: measured with the partner absent


def test_label_table_and_check_on_likelihood_trials():
    pools = pd.DataFrame({"query_id": ["q"] * 3, "chunk_id": ["a", "b", "c"], "position": [0, 1, 2],
                          "question": ["?"] * 3, "origin": ["seed", "random", "random"], "text": ["x", "y", "z"]})
    rng = np.random.default_rng(0)
    x = balanced_design(3, 16, rng)
    trials = pd.DataFrame({"query_id": "q", "subset": [[d for d, keep in zip("abc", row) if keep] for row in x],
                           "loglik": -5 + 3.0 * x[:, 0] + rng.normal(0, 0.2, 16), "success": pd.NA})
    labels, pairs = label_table(pools, trials, LabelingParams(estimator="regression", outcome="likelihood",
                                                              alpha=0.05, threshold_nats=0.5))
    main = labels[labels.estimator == "regression"].set_index("chunk_id")
    assert main.loc["a", "label"] == "YES" and main.loc["a", "effect"] > 2.5 and main["delta_p"].isna().all()
    assert pairs[0]["candidates"][0]["empirical_relevance"] in ("YES", "NO", "UNCERTAIN")
    assert check_labels(labels).passed
    broken = labels.copy()
    broken.loc[broken.index[0], "effect"] = broken.loc[broken.index[0], "ci_high"] + 5   # effect outside its CI
    broken.loc[broken.index[0], "label"] = "YES"
    assert not check_labels(broken).passed


@pytest.mark.parametrize("weight, expected", [(0.0, "NO"), (0.5, "YES"), (1.0, "YES")])
def test_question_weight_scales_the_question_part_of_qa_likelihood(weight, expected):
    """`b` raises only the question's own log-likelihood (a first-hop paragraph): it is relevant exactly when
    the question part counts, and its effect is the weight times the question's gain."""
    pools = pd.DataFrame({"query_id": ["q"] * 3, "chunk_id": ["a", "b", "c"], "position": [0, 1, 2],
                          "question": ["?"] * 3, "origin": ["seed"] * 3, "text": ["x", "y", "z"]})
    rng = np.random.default_rng(1)
    x = balanced_design(3, 16, rng)
    trials = pd.DataFrame({"query_id": "q", "subset": [[d for d, keep in zip("abc", row) if keep] for row in x],
                           "loglik": -5 + 4.0 * x[:, 0] + rng.normal(0, 0.1, 16),
                           "loglik_question": -60 + 8.0 * x[:, 1] + rng.normal(0, 0.1, 16), "success": pd.NA})
    cfg = LabelingParams(estimator="regression", outcome="qa_likelihood", alpha=0.05, threshold_nats=2.0,
                         question_weight=weight)
    labels, _ = label_table(pools, trials, cfg)
    main = labels[labels.estimator == "regression"].set_index("chunk_id")
    assert main.loc["a", "label"] == "YES"
    assert main.loc["b", "label"] == expected
    assert main.loc["b", "effect"] == pytest.approx(8.0 * weight, abs=0.3)


def test_labels_rank_by_the_average_effect_and_decide_by_the_context_effect():
    """`a` and `b` help only together (+6 nats when both are present), `c` helps alone (+2.5). Each AND member's
    label is decided in its context (`effect` ≈ 6: with its partner), while the effect size labels are ranked by
    is the average over the random subsets of the others (`average_effect` ≈ 3: the partner is there half the
    time), which is the plain main-effect regression's estimate."""
    pools = pd.DataFrame({"query_id": ["q"] * 4, "chunk_id": list("abcd"), "position": range(4),
                          "question": ["?"] * 4, "origin": ["seed"] * 4, "text": list("wxyz")})
    rng = np.random.default_rng(3)
    x = balanced_design(4, 32, rng)
    y = -8 + 6.0 * (x[:, 0] & x[:, 1]) + 2.5 * x[:, 2] + rng.normal(0, 0.1, 32)
    trials = pd.DataFrame({"query_id": "q", "subset": [[d for d, keep in zip("abcd", row) if keep] for row in x],
                           "loglik": y, "success": pd.NA})
    labels, pairs = label_table(pools, trials, LabelingParams(estimator="regression", outcome="likelihood",
                                                              alpha=0.05, threshold_nats=1.0))
    main = labels[labels.estimator == "regression"].set_index("chunk_id")
    assert (main.loc[["a", "b", "c"], "label"] == "YES").all() and main.loc["d", "label"] == "NO"
    assert main.loc["a", "effect"] == pytest.approx(6.0, abs=0.5)
    assert main.loc["c", "effect"] == pytest.approx(2.5, abs=0.3)
    z = np.column_stack([np.ones(32), 2.0 * x - 1.0])
    ols = 2 * np.linalg.lstsq(z, y, rcond=None)[0][1:]
    assert main["average_effect"].to_numpy() == pytest.approx(ols, abs=1e-6)
    assert main.loc["a", "average_effect"] == pytest.approx(3.0, abs=0.5)
    assert [c["average_effect"] for c in pairs[0]["candidates"]] == pytest.approx(list(ols), abs=1e-3)
    assert check_labels(labels).passed


def test_the_in_process_key_names_the_weights_and_the_binding(tmp_path, monkeypatch):
    """Other weights under the same model name, or another llama.cpp binding, give other log-probabilities: none of
    them is served the cached values of the first (a label set never mixes the two)."""
    original = local_model_path("smollm2-135m")
    cache = CallCache(tmp_path / "c.db")
    req = ScoreRequest("Question: Which band is Canadian?\nAnswer:", (" Rush",))

    def score(path):
        scorer = LlamaCppScorer(path, "local/smollm2-135m", cache, n_ctx=256, n_threads=1)
        try:
            return scorer.score_many([req])[0]
        finally:
            scorer.close()

    first = score(original)
    assert not first.cached and score(original).cached
    same = tmp_path / "same.gguf"
    shutil.copyfile(original, same)
    assert score(same).cached                                   # the same bytes elsewhere: the same weights
    changed = tmp_path / "changed.gguf"
    shutil.copyfile(original, changed)
    with open(changed, "r+b") as f:                             # one byte of the last tensor's data
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0x01]))
    assert not score(changed).cached
    monkeypatch.setattr(scoring, "binding_version", lambda: "llama-cpp-python 9.9.9")
    assert not score(original).cached


def test_a_weights_digest_is_read_once_per_file_version(tmp_path, monkeypatch):
    weights = tmp_path / "w.gguf"
    weights.write_bytes(b"GGUF" + bytes(1000))
    cache = CallCache(tmp_path / "c.db")
    digest = file_sha256(weights, cache)
    assert digest == hashlib.sha256(weights.read_bytes()).hexdigest()
    monkeypatch.setattr(llm_cache, "_DIGESTS", {})              # a new process: the database remembers it
    monkeypatch.setattr(llm_cache.hashlib, "sha256", lambda: pytest.fail("the file was read again"))
    assert file_sha256(weights, cache) == digest
    weights.write_bytes(b"GGUF" + bytes(999) + b"\x01")        # rewritten in place: a new modification time
    os.utime(weights, ns=(time.time_ns(), time.time_ns() + 10**9))
    with pytest.raises(pytest.fail.Exception, match="read again"):
        file_sha256(weights, cache)
