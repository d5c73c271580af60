"""Issue 15, finding 9: registry typos, alias bombs, bad qrels and malformed HotpotQA records are refused with one
short error naming the file, line or key."""
from __future__ import annotations

import json
import time

import pytest
import yaml

from causal_assets.core.benchmarks import load_benchmark_registry
from causal_assets.core.corpus.beir import load_beir_qrels, load_beir_queries
from causal_assets.core.corpus.hotpotqa import load_hotpotqa
from causal_assets.core.errors import ConfigError, CorpusError

ENTRY = {"name": "hotmini", "loader": "hotpotqa", "corpus": "hotpotqa", "path": "/nonexistent.jsonl",
         "splits": ["dev"], "eval_splits": ["dev"]}


def _registry(tmp_path, **extra):
    path = tmp_path / "benchmarks.yaml"
    path.write_text(yaml.safe_dump({"benchmarks": [{**ENTRY, **extra}]}))
    return path


@pytest.mark.parametrize("section, value, message", [
    ("monte_carlo", {"budjet": 4}, r"monte_carlo\.budjet: unknown key; known keys: .*budget"),
    ("monte_carlo", {"budget": "many"}, r"monte_carlo\.budget: Input should be a valid integer"),
    ("monte_carlo", {"outcome": "vibes"}, r"monte_carlo\.outcome: Input should be 'qa_likelihood', 'likelihood', 'success' or 'both'"),
    ("monte_carlo", {"split": "test"}, r"monte_carlo.split 'test' is not one of splits \['dev'\]"),
    ("pooling", {"sise": 8}, r"pooling\.sise: unknown key; known keys: size"),
    ("pooling", {"size": 0}, r"pooling\.size: Input should be greater than or equal to 1"),
])
def test_registry_typos_are_refused(tmp_path, section, value, message):
    with pytest.raises(ConfigError, match=message):
        load_benchmark_registry(_registry(tmp_path, **{section: value}))


def test_monte_carlo_accepts_the_labelling_keys(tmp_path):
    mc = {"estimator": "adaptive", "threshold": 0.1, "budget": 24, "batch": 8, "alpha": 0.05, "seed": 1,
          "max_consecutive_errors": 3, "split": "dev", "max_questions": 30, "outcome": "qa_likelihood",
          "solver": "gemma3-270m", "threshold_nats": 0.5}
    spec = load_benchmark_registry(_registry(tmp_path, monte_carlo=mc, pooling={"size": 8, "max_doc_chars": 400}))
    assert spec["hotmini"].monte_carlo == mc                       # still a plain dict, as given
    assert spec["hotmini"].monte_carlo.get("budget") == 24


@pytest.mark.parametrize("where", ["name: *g", "name: bombq\n    loader: beir\n    path: x\n    options: {x: *g}"])
def test_yaml_alias_bomb_gives_a_short_error(tmp_path, where):
    """In a name the bomb failed validation with a short error; in an entry's free-form `options` it was accepted,
    and `tuned_retriever_configs` expanded it (model_dump: 13 s and 1 GB at 7 levels; at 8 a step died)."""
    bomb = ("a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
            "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
            f"benchmarks:\n  - {where}\n")
    path = tmp_path / "benchmarks.yaml"
    path.write_text(bomb)
    assert len(bomb) < 400
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"benchmarks.yaml: expands to more than 100,000 values") as e:
        load_benchmark_registry(path)
    assert time.perf_counter() - started < 2
    assert len(str(e.value)) < 1000, len(str(e.value))


@pytest.mark.parametrize("score", ["-5", "nan", "inf", "1e308"])
def test_qrels_with_impossible_scores_are_refused(tmp_path, score):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t{score}\n")
    with pytest.raises(CorpusError, match=r"test\.tsv:3: score .* must be a finite number in \[0, 100\]"):
        load_beir_qrels(tmp_path, "test")


def test_duplicated_qrels_pairs_and_query_ids_are_refused(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t0\n")
    with pytest.raises(CorpusError, match=r"test\.tsv:3: duplicate judgement for query-id 'q1', corpus-id 'd1'"):
        load_beir_qrels(tmp_path, "test")
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n')
    with pytest.raises(CorpusError, match=r"queries\.jsonl:2: duplicate query _id 'q1'"):
        load_beir_queries(tmp_path)


GOOD = {"_id": "x1", "question": "Q?", "answer": "A", "context": [["T1", ["s1. ", "s2."]], ["T2", ["u."]]],
        "supporting_facts": [["T1", 0]]}


@pytest.mark.parametrize("change, message", [
    ({"context": []}, r"h\.jsonl:1: context must be a non-empty list"),
    ({"supporting_facts": None}, r"h\.jsonl:1: missing field 'supporting_facts'"),
    ({"supporting_facts": []}, r"h\.jsonl:1: supporting_facts must be a non-empty list"),
    ({"supporting_facts": [["T1"]]}, r"h\.jsonl:1: supporting_facts\[0\] must be \[title, sentence index\]"),
    ({"supporting_facts": ["T1", 0]}, r"h\.jsonl:1: supporting_facts\[0\] must be \[title, sentence index\]"),
    ({"supporting_facts": [["Nope", 0]]}, r"h\.jsonl:1: supporting_facts title 'Nope' is not a context paragraph"),
])
def test_malformed_hotpotqa_records_name_file_and_line(tmp_path, change, message):
    path = tmp_path / "h.jsonl"
    record = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(CorpusError, match=message):
        load_hotpotqa(path, "h")
    path.write_text(json.dumps(GOOD) + "\n")
    chunks, questions = load_hotpotqa(path, "h")
    assert len(chunks) == 2 and questions[0].supporting_titles == ("T1",)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_registry_nested_too_deeply_is_one_error(tmp_path, suffix):
    """20,000 nested lists gave a RecursionError traceback (a second probe)."""
    path = tmp_path / f"benchmarks{suffix}"
    path.write_text('{"benchmarks": ' + "[" * 20_000 + "]" * 20_000 + "}")
    with pytest.raises(ConfigError, match=rf"benchmarks\{suffix}: nested too deeply to read"):
        load_benchmark_registry(path)

