"""The evaluation of a user's questions over their own folder (the tutorial's example, docs/tutorial.md), materialized
for real (MiniLM, BM25, the report), with no LLM: against the gold files, against Monte Carlo labels only where
the questions have no gold, refused before anything is written where a split has nothing to evaluate, and with a
caveat on a tiny sample; a report of a benchmark without labels says nothing about labels."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dagster import materialize

from causal_assets.core.foundation.storage import write_parquet_atomic
from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
from causal_assets.defs.evaluation import evaluation_tables
from causal_assets.resources import LLM, BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage
from tests.conftest import HOTPOT, require

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own-documents"
# Partitions are the shipped registry's names (fixed when the code location loads): the tutorial's folder and
# questions go under two of them here.
CORPUS, BENCH, NOGOLD = "musique", "musique", "2wiki"
INDEX = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary]
EVALUATION = ["evaluation_metrics", "evaluation_runs", "evaluation_failures", "evaluation_queries",
              "evaluation_qrels", "evaluation_answers", "evaluation_per_query"]


def make_resources(tmp_path: Path, benchmarks: list[dict]) -> dict:
    shutil.copytree(EXAMPLE / "docs", tmp_path / "docs")
    shutil.copy(EXAMPLE / "questions.jsonl", tmp_path / "questions.jsonl")
    hotpot = tmp_path / "hotpot_one.jsonl"
    hotpot.write_text(require(HOTPOT).read_text().splitlines()[0] + "\n")   # one question, in the `test` half
    (tmp_path / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx"},
        {"name": CORPUS, "loader": "folder", "path": "docs"},
        {"name": "hotpotqa", "loader": "hotpotqa", "path": str(hotpot)}]}))
    (tmp_path / "benchmarks.yaml").write_text(yaml.safe_dump({"benchmarks": benchmarks}))
    storage = Storage(base_path=str(tmp_path / "parquet"), catalog_path=str(tmp_path / "catalog.duckdb"),
                      reports_dir=str(tmp_path / "reports"))
    return {"storage": storage, "corpus_registry": CorpusRegistry(path=str(tmp_path / "corpora.yaml")),
            "benchmark_registry": BenchmarkRegistry(path=str(tmp_path / "benchmarks.yaml"),
                                                    corpora=str(tmp_path / "corpora.yaml")),
            "io_manager": ParquetIOManagerFactory(storage=storage), "llm": LLM(cache_path=str(tmp_path / "llm.sqlite"))}


RETRIEVERS = {"bm25": {}, "dense": {}, "hybrid": {}}
# the answer utility (on by default) is tested on its own (tests/cli/test_benchmark_commands.py runs it on this folder)
GOLD = {"name": BENCH, "loader": "questions", "corpus": CORPUS, "path": "questions.jsonl", "retrievers": RETRIEVERS,
        "answers": {"enabled": False}}


def evaluate(resources, partition: str, corpus: str):
    assert materialize(INDEX, resources=resources, partition_key=corpus).success
    return materialize([evaluation_tables, *INDEX], resources=resources, partition_key=partition,
                       selection=EVALUATION, raise_on_error=False)


def report_of(result) -> str:
    [mat] = [e.materialization for e in result.get_asset_materialization_events()
             if e.materialization.asset_key.path[-1] == "evaluation_metrics"]
    return mat.metadata["report"].value


@pytest.mark.slow
def test_gold_questions_of_a_folder_are_evaluated_with_a_small_sample_caveat_and_no_word_of_labels(tmp_path):
    resources = make_resources(tmp_path, [GOLD])
    result = evaluate(resources, BENCH, CORPUS)
    assert result.success
    metrics = pd.read_parquet(tmp_path / "parquet" / "evaluation_metrics" / f"{BENCH}.parquet")
    assert set(metrics["truth"]) == {"qrels"} and set(metrics["split"]) == {"test"}
    assert metrics["value"].notna().all()
    queries = pd.read_parquet(tmp_path / "parquet" / "evaluation_queries" / f"{BENCH}.parquet")
    assert set(queries["query_id"]) == {"port", "single_file", "keep", "exclude"}   # the `test` hash half
    report = report_of(result)
    assert "**Small sample: `test` has 4 queries.**" in report
    assert "with 4 queries and none missing, up to 53% of such questions could still miss" in report
    # no labels here: the report says nothing about them
    assert "label" not in report.lower() and "monte carlo" not in report.lower(), report


@pytest.mark.slow
def test_questions_without_gold_are_evaluated_against_the_labels_only(tmp_path):
    records = [json.loads(line) for line in (EXAMPLE / "questions.jsonl").read_text().splitlines()]
    resources = make_resources(tmp_path, [{**GOLD, "name": NOGOLD, "path": "nogold.jsonl"}])
    (tmp_path / "nogold.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "gold"}) + "\n"
                                                   for r in records if "answer" in r))
    # Without labels the eval split has nothing to evaluate: refused before anything is written.
    result = evaluate(resources, NOGOLD, CORPUS)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error
    while failure.cause is not None and "Error occurred while executing" in failure.message:
        failure = failure.cause
    assert "eval split 'test' has nothing to evaluate: 3 questions, none with gold documents" in failure.message
    assert f"causal-assets label {NOGOLD}" in failure.message
    assert not (tmp_path / "parquet" / "evaluation_metrics").exists()
    # With labels: each test question's YES documents are its truth (the gold pages, as the tutorial's labels had)
    labelled = {"port": "scheduling.md#0", "single_file": "restore.md#0", "keep": "pruning.md#0"}
    rows = [{"query_id": q, "chunk_id": d, "label": "YES" if d == gold else "NO", "effect": 9.0 if d == gold else -1,
             "ci_low": 5.0 if d == gold else -3, "ci_high": 12.0 if d == gold else 0.5, "average_effect": 8.0
             if d == gold else -1.0, "outcome": "qa_likelihood", "estimator": "regression", "benchmark": NOGOLD}
            for q, gold in labelled.items() for d in ("scheduling.md#0", "restore.md#0", "pruning.md#0")]
    write_parquet_atomic(pd.DataFrame(rows), tmp_path / "parquet" / "mc_labels" / f"{NOGOLD}.parquet")
    result = evaluate(resources, NOGOLD, CORPUS)
    assert result.success
    metrics = pd.read_parquet(tmp_path / "parquet" / "evaluation_metrics" / f"{NOGOLD}.parquet")
    assert set(metrics["truth"]) == {"mc_labels"} and metrics["value"].notna().all()
    ndcg = metrics[(metrics.metric == "ndcg") & (metrics.k == 10)].set_index("retriever")["value"]
    assert (ndcg > 0.5).all(), ndcg
    report = report_of(result)
    assert "no question has gold documents; its figures are against the Monte Carlo labels only" in report
    assert "## Against the Monte Carlo labels" in report


@pytest.mark.slow
def test_an_eval_split_without_questions_is_refused_naming_it_before_anything_is_written(tmp_path):
    """One HotpotQA question, in the `test` hash half: `train` is empty. Evaluating it wrote 228 all-NaN metric rows
    and a NaN report before the blocking check failed."""
    entry = {"name": "hotpotqa", "loader": "hotpotqa", "corpus": "hotpotqa", "path": str(tmp_path / "hotpot_one.jsonl"),
             "splits": ["dev", "train"], "eval_splits": ["train"], "validator": "answer_f1",
             "retrievers": {"bm25": {}}}
    resources = make_resources(tmp_path, [entry])
    result = evaluate(resources, "hotpotqa", "hotpotqa")
    assert not result.success
    errors = [e.step_failure_data.error for e in result.all_events if e.is_step_failure]
    text = " ".join(str(err.message) + " " + str(err.cause.message if err.cause else "") for err in errors)
    assert "eval split 'train' has nothing to evaluate: 0 questions" in text, text
    assert not (tmp_path / "parquet" / "evaluation_metrics").exists()
    assert not (tmp_path / "reports" / "hotpotqa.md").exists()
