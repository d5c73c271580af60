"""Answer utility (core/evaluation/answers.py) with the real solver: Gemma-3-270M scoring in-process the gold
answer of a planted corpus, where one document holds the answer. A retriever that ranks it first makes the answer
likelier than no context, and more than a retriever showing only distractors; the no-context prompt is scored once
per question; a second run is served by the call cache alone. The report's table and the checks without a model."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from causal_assets.core.outputs.checks import check_answers, check_metrics
from causal_assets.core.corpus.chunk import Chunk, chunks_to_frame
from causal_assets.core.evaluation.answers import (ANSWER_COLUMNS, GOLD, LABELS, RANDOM, answer_metrics,
                                                   build_questions, document_cut, label_rankings, measure_answers,
                                                   planned_calls, reference_rankings)
from causal_assets.core.index.build import build_index
from causal_assets.core.labeling.pools import PoolParams, build_pools
from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.evaluation.report import answer_section, answer_table
from causal_assets.core.labeling.solver import solver_prompt
from causal_assets.core.llm.cache import CallCache
from causal_assets.core.llm.models import local_scorer
from tests.core.tiny_corpus import tiny_index

DOCS = {
    "port": ("Brindle scheduler", "The Brindle scheduler daemon exposes its metrics on port 7461."),
    "cipher": ("Brindle vaults", "Every chunk of a Brindle vault is sealed with the XChaCha20-Poly1305 cipher."),
    "paris": ("Paris", "Paris is the capital of France and lies on the Seine."),
    "plants": ("Photosynthesis", "Plants turn sunlight, water and carbon dioxide into sugar."),
    "chess": ("Chess", "A chess board has sixty-four squares."),
}
QUERIES = {"q_port": "On which port does the Brindle scheduler daemon expose its metrics?",
           "q_cipher": "Which cipher seals the chunks of a Brindle vault?"}
ANSWERS = {"q_port": "7461", "q_cipher": "XChaCha20-Poly1305"}
GOLD_DOC = {"q_port": "port", "q_cipher": "cipher"}
DISTRACTORS = ["paris", "plants", "chess"]
KS = (1, 3)


def doc(chunk_id: str, question: str) -> tuple[str, str]:
    """The planted documents are short: each shown whole, beside any question."""
    return DOCS[chunk_id]


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    """tests/core/conftest.py's scorer on the threads other processes leave free (the product's default) instead of
    a fixed 2: beside other work on 2 cores, 2 spin-waiting llama.cpp threads took 5 s for a 128-token prompt that
    1 thread scores in 1 s (load 9)."""
    root = tmp_path_factory.mktemp("answers")
    s = local_scorer("gemma3-270m", CallCache(root / "calls.sqlite"), root / "models")
    yield s
    s.close()


def runs_frame() -> pd.DataFrame:
    """`planted` ranks the answer's document first, `distractors` never shows it."""
    rows = []
    for q, gold in GOLD_DOC.items():
        for retriever, docs in (("planted", [gold, *DISTRACTORS]), ("distractors", DISTRACTORS)):
            rows += [(retriever, q, d, rank) for rank, d in enumerate(docs, 1)]
    return pd.DataFrame(rows, columns=["retriever", "query_id", "chunk_id", "rank"])


def questions():
    return build_questions(list(QUERIES), QUERIES, ANSWERS, {}, runs_frame(),
                           {q: {d: 1.0} for q, d in GOLD_DOC.items()}, None, {})


class Spy:
    """The scorer, with every batch it is asked recorded."""

    def __init__(self, scorer):
        self.scorer, self.model_id, self.batches = scorer, scorer.model_id, []

    def score_many(self, requests):
        self.batches.append(list(requests))
        return self.scorer.score_many(requests)


@pytest.mark.slow
def test_a_retriever_ranking_the_answer_first_gains_more_than_distractors_and_a_rerun_is_free(scorer):
    spy = Spy(scorer)
    run = measure_answers(questions(), doc, spy, "answer_f1", KS)
    rows = run.rows
    assert list(rows.columns) == ANSWER_COLUMNS[2:] and not run.errors
    gain = rows.set_index(["retriever", "k", "query_id"])["answer_gain"]
    for q in QUERIES:
        for k in KS:
            assert gain["planted", k, q] > 0, (q, k, rows)
            assert gain["planted", k, q] > gain["distractors", k, q], (q, k, rows)
        assert gain[GOLD, 1, q] == gain["planted", 1, q]   # the same prompt: the same value
    # one batch per question; in it the no-context prompt once, and every prompt once
    assert len(spy.batches) == len(QUERIES)
    for q, batch in zip(QUERIES, spy.batches):
        baseline = solver_prompt(QUERIES[q], [], "answer_f1")
        assert sum(r.prompt == baseline for r in batch) == 1
        assert len({r.prompt for r in batch}) == len(batch)
        n_rankings = len({name for name in rows[rows.query_id == q]["retriever"]})
        assert len(batch) < planned_calls(1, n_rankings, len(KS))   # identical prompts asked once
    assert rows.groupby("query_id")["loglik_no_context"].nunique().eq(1).all()
    assert (rows["loglik"] < 0).all() and rows["n_docs"].le(rows["k"]).all()
    assert run.scored == run.prompts > 0
    # a second run: every prompt from the call cache, no token through the model
    evaluated = scorer.tokens_evaluated
    again = measure_answers(questions(), doc, Spy(scorer), "answer_f1", KS)
    assert again.scored == 0 and again.prompts == run.prompts and scorer.tokens_evaluated == evaluated
    pd.testing.assert_frame_equal(again.rows, rows)
    assert check_answers(rows.assign(benchmark="toy", split="test")).passed


def test_references_gold_first_then_random_labels_by_effect_random_seeded_by_question():
    refs = reference_rankings("q1", {"b": 1.0, "a": 2.0, "z": 0.0}, ["a", "b", "c", "d", "e"], ["d", "a"])
    assert refs[GOLD][:2] == ["a", "b"] and sorted(refs[GOLD]) == ["a", "b", "c", "d", "e"]
    assert refs[LABELS] == ["d", "a"]
    assert refs[RANDOM] == reference_rankings("q1", {}, ["a", "b", "c", "d", "e"], None)[RANDOM]
    assert sorted(refs[RANDOM]) == ["a", "b", "c", "d", "e"]
    assert LABELS not in reference_rankings("q1", {}, ["a"], None) and GOLD not in reference_rankings("q1", {}, ["a"], None)
    labels = pd.DataFrame({"query_id": ["q", "q", "q", "q"], "chunk_id": ["x", "y", "x", "y"],
                           "estimator": ["regression", "regression", "naive", "naive"],
                           "average_effect": [0.5, 3.0, 9.0, -9.0]})
    assert label_rankings(labels) == {"q": ["y", "x"]}   # the labels' own estimator, largest effect first


def answer_rows() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for q in range(12):
        base = -8.0 + rng.normal()
        for retriever, shift in (("bm25", 2.0), ("dense", 1.0), ("@gold", 3.0), ("@random", 0.0)):
            for k in (1, 3):
                g = shift + rng.normal(0, 0.5)
                rows.append(("toy", "test", retriever, k, f"q{q}", base + g, base, g, k, math.nan, math.nan))
    return pd.DataFrame(rows, columns=ANSWER_COLUMNS)


def test_report_section_intervals_and_paired_test_against_the_best_retriever(tmp_path):
    rows = answer_rows()
    table = answer_table(rows)
    assert set(table["best retriever"]) == {"bm25"}   # references are never the best retriever
    dense = table[(table.retriever == "dense") & (table.k == 1)].iloc[0]
    assert dense["Δ vs best"].startswith("-") and dense["p (randomization)"].endswith("*")
    assert table[(table.retriever == "bm25")]["Δ vs best"].eq("(best)").all()
    plain, inline = answer_section("toy", rows, ["a note"], tmp_path)
    assert "## Answer utility" in plain[0] and "- a note" in plain
    assert (tmp_path / "toy_test_answers.png").stat().st_size > 1000
    assert any("data:image/png;base64," in line for line in inline)
    skipped, _ = answer_section("toy", None, ["not measured: no scorer"], tmp_path)
    assert skipped[-2] == "- not measured: no scorer"


def test_checks_accept_nats_for_answers_and_keep_ranking_metrics_in_the_unit_range():
    rows = answer_rows()
    metrics = answer_metrics(rows)
    assert set(metrics["metric"]) == {"answer_gain"} and set(metrics["truth"]) == {"answers"}
    assert math.isclose(metrics[(metrics.retriever == "bm25") & (metrics.k == 1)]["value"].iloc[0],
                        rows[(rows.retriever == "bm25") & (rows.k == 1)]["answer_gain"].mean())
    ranking = pd.DataFrame({"truth": ["qrels"], "retriever": ["bm25"], "metric": ["ndcg"], "k": [10],
                            "value": [0.5]})
    assert check_metrics(pd.concat([ranking, metrics.assign(value=metrics["value"] + 5)])).passed
    assert not check_metrics(pd.concat([ranking.assign(value=1.5), metrics])).passed
    assert not check_metrics(pd.concat([ranking, metrics.assign(value=float("inf"))])).passed
    assert check_answers(rows).passed and check_answers(rows.iloc[:0]).passed
    assert "answer_score" not in set(metrics["metric"])   # no generating solver: no verdict metrics
    judged = rows.assign(answer_score=(rows["answer_gain"] > 1).astype(float) * 0.8,
                         answer_passed=(rows["answer_gain"] > 1).astype(float))
    verdicts = answer_metrics(judged)
    assert set(verdicts["metric"]) == {"answer_gain", "answer_score", "answer_passed"}
    passed = verdicts[(verdicts.metric == "answer_passed") & (verdicts.retriever == "@gold")]
    assert passed["value"].between(0, 1).all() and check_metrics(verdicts).passed
    assert not check_metrics(verdicts.assign(value=verdicts["value"] + 2)).passed   # verdicts stay in [0, 1]
    assert check_answers(judged).passed and not check_answers(judged.assign(answer_passed=2.0)).passed
    table = answer_table(judged)
    assert "answers passed" in table and "answers passed" not in answer_table(rows)
    gold_at_1 = judged[(judged.retriever == "@gold") & (judged.k == 1)]["answer_passed"].mean()
    assert table[(table.retriever == "@gold") & (table.k == 1)]["answers passed"].iloc[0] == f"{gold_at_1:.2f}"
    assert not check_answers(rows.assign(answer_gain=float("nan"))).passed
    assert not check_answers(rows.assign(n_docs=rows["k"] + 1)).passed


@pytest.mark.parametrize("answers, with_answers, scores, note", [
    ({}, False, True, None),                                       # SciFact: no answers, no word, no LLM asked
    ({"enabled": True}, False, True, "not measured: no evaluated question has an answer"),
    ({"enabled": False}, True, True, "off (`answers: {enabled: true}`"),
    ({}, True, False, "not measured: the configured LLM returns no prompt log-probabilities"),   # on by default
    ({"enabled": True}, True, False, "not measured: the configured LLM returns no prompt log-probabilities"),
])
def test_off_or_skipped_without_answers_or_without_a_scoring_llm(tmp_path, answers, with_answers, scores, note):
    """Where nothing is measured, no LLM is loaded and no row written; the report's note says why, except for a
    benchmark whose questions carry no answers at all."""
    import yaml

    from causal_assets.core.registry.benchmarks import Benchmark, load_benchmark_registry
    from causal_assets.core.evaluation.suite import answer_utility

    path = tmp_path / "benchmarks.yaml"
    path.write_text(yaml.safe_dump({"benchmarks": [
        {"name": "toy", "loader": "hotpotqa", "corpus": "hotpotqa", "path": "/nonexistent.jsonl",
         "splits": ["test"], "eval_splits": ["test"], "answers": answers}]}))
    spec = load_benchmark_registry(path)["toy"]
    bench = Benchmark("toy", "test", QUERIES, {q: {d: 1.0} for q, d in GOLD_DOC.items()},
                      answers=ANSWERS if with_answers else {})
    asked = []

    def scorer():
        asked.append(1)
        return None if not scores else pytest.fail("a scorer was asked for while nothing is to be measured")

    rows, notes = answer_utility(spec, None, [("test", bench, list(QUERIES), runs_frame())], None, scorer)
    assert rows.empty and list(rows.columns) == ANSWER_COLUMNS
    assert (notes == []) if note is None else (len(notes) == 1 and notes[0].startswith(note)), notes
    assert len(asked) == (1 if not scores else 0)


@pytest.mark.slow
def test_a_generating_solver_s_answers_are_judged_per_prompt(scorer, tmp_path):
    """Where the solver generates (`answers.verdicts`), each distinct prompt's greedy answer (the packaged local
    server, the same Gemma-3-270M) is validated: the planted retriever's top 1 holds the answer and passes, the
    distractors and no context do not; a failed generation would leave NaN, never a failed answer."""
    from causal_assets.core.labeling.solver import BlindSolver
    from causal_assets.core.llm.client import LLMClient
    from causal_assets.core.llm.server import LocalLlamaServer

    with LocalLlamaServer(n_threads=1, n_ctx=2048, log_path=tmp_path / "server.log", startup_timeout_s=90) as srv, \
            LLMClient(srv.base_url, srv.alias, cache=CallCache(tmp_path / "chat.sqlite"), timeout_s=60,
                      max_retries=1) as client:
        run = measure_answers(questions(), doc, scorer, "answer_containment", (1,),
                              solver=BlindSolver(client, "answer_containment"))
    rows = run.rows.set_index(["retriever", "query_id"])
    assert not run.errors and rows["answer_passed"].notna().all()
    for q in QUERIES:
        assert rows.loc[("planted", q), "answer_passed"] == 1.0, rows.loc["planted"]
        assert rows.loc[("distractors", q), "answer_passed"] == 0.0, rows.loc["distractors"]
    assert set(answer_metrics(run.rows.assign(split="test"))["metric"]) == {"answer_gain", "answer_score",
                                                                            "answer_passed"}


def test_the_truths_choices_are_scored_and_the_answers_choice_paired_with_the_judgements():
    from causal_assets.core.evaluation.answers import paired_gain
    from causal_assets.core.evaluation.report import truth_selection_section

    rows = answer_rows().replace({"retriever": {"bm25": "bm25_tuned", "dense": "dense_tuned"}})
    d = paired_gain(rows, "bm25_tuned", "dense_tuned", 1)
    wide = rows[rows.k == 1].pivot_table(index="query_id", columns="retriever", values="answer_gain")
    assert d["questions"] == 12 and math.isclose(d["delta"], (wide["bm25_tuned"] - wide["dense_tuned"]).mean())
    assert d["low"] <= d["delta"] <= d["high"] and 0 <= d["p"] <= 1
    assert paired_gain(rows, "bm25_tuned", "missing", 1) is None
    metrics = pd.DataFrame({"split": "test", "truth": "qrels", "retriever": ["bm25_tuned", "dense_tuned"],
                            "metric": "ndcg", "k": 10, "value": [0.6, 0.7]})
    truths = {"selected_by": {"qrels": "dense", "mc_labels": None, "answers": "bm25"}, "answer_k": 1,
              "figures": {"dense": {"qrels": 0.7, "answers": 1.0}, "bm25": {"qrels": 0.6, "answers": 2.0}},
              "questions": {"qrels": 12, "mc_labels": 0, "answers": 12}}
    lines = truth_selection_section(truths, metrics, rows, ("ndcg", 10))
    text = "\n".join(lines)
    assert "| answers | `bm25_tuned`  |" in text and "| qrels   | `dense_tuned` |" in text
    assert f"answer gain Δ {d['delta']:+.3f} nats" in text and "it helps the solver more" in text


MANUAL = "\n".join(["Brindle installation notes.", "Copy the brindle binary to /usr/local/bin.",
                    "Restart the shell before the first run.",
                    "The Brindle scheduler daemon exposes its metrics on port 7461."])


def test_a_long_document_is_shown_as_its_candidate_pool_cut_it_not_from_its_start():
    """One cut for the labels and the answer utility: a document longer than `pooling.max_doc_chars` shows the
    lines that best match the question (`text.passages.fit_passage`), as the candidate pool kept them, so the
    answer's line in the manual's last line is shown where its first 80 characters hold no answer."""
    chunks = [Chunk(chunk_id="manual", corpus="cut", source="test", path="", title="Brindle manual", text=MANUAL,
                    kind="paragraph"),
              *[Chunk(chunk_id=d, corpus="cut", source="test", path="", title=t, text=x, kind="paragraph")
                for d, (t, x) in DOCS.items() if d != "port"]]
    index = build_index(chunks_to_frame(chunks), "cut", embedder=tiny_index().embedder)
    question = QUERIES["q_port"]
    bench = Benchmark("cut", "test", {"q_port": question}, {"q_port": {"manual": 1.0}}, answers={"q_port": "7461"})
    params = PoolParams(size=4, hard_negatives=2, max_doc_chars=80)
    pools = build_pools(index, bench, ["q_port"], params)
    cut = document_cut(index, params.doc_chars)
    assert len(pools) == 4 and "manual" in set(pools["chunk_id"])
    for chunk_id, title, text in zip(pools["chunk_id"], pools["title"], pools["text"]):
        assert cut(chunk_id, question) == (title, text), chunk_id
    title, text = cut("manual", question)
    assert "7461" not in MANUAL[:80] and "port 7461" in text and len(text) <= 80
    # beside another question the same document shows other lines: the cut follows the question
    assert cut("manual", "Where do I copy the binary?")[1] != text
