"""A user's questions file as a benchmark over any registered corpus (`loader: questions`): JSONL and CSV, answers
with aliases, gold by document id or by a folder corpus's file path, questions without gold (the labels are their
only truth) or without an answer (evaluated only), their own splits, and every malformed record refused with one
line naming the file, the line and the field."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import yaml

from causal_assets.core.registry.benchmarks import hash_half, load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.foundation.errors import ConfigError, CorpusError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own-documents"


def _folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True, exist_ok=True)
    (docs / "install.md").write_text("# Install\n\nRun the installer; the tool listens on port 7461.\n")
    (docs / "guide" / "usage.md").write_text("# Usage\n\n" + "\n\n".join(f"Paragraph {i}: " + "word " * 40
                                                                          for i in range(6)))
    (docs / "notes.txt").write_text("Snapshots are kept for 30 days by default.\n")
    return docs


def _registries(tmp_path: Path, questions: str, suffix: str = ".jsonl", chunk_chars: int = 300,
                **entry) -> tuple[Path, Path]:
    docs = _folder(tmp_path)
    (tmp_path / f"questions{suffix}").write_text(questions, encoding="utf-8")
    corpora = tmp_path / "corpora.yaml"
    corpora.write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx"},
        {"name": "mydocs", "loader": "folder", "path": "docs",
         "options": {"chunk_chars": chunk_chars, "overlap_chars": 0}}]}))
    benchmarks = tmp_path / "benchmarks.yaml"
    benchmarks.write_text(yaml.safe_dump({"benchmarks": [
        {"name": "mine", "loader": "questions", "corpus": "mydocs", "path": f"questions{suffix}", **entry}]}))
    return benchmarks, corpora


def _jsonl(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _load(benchmarks: Path, corpora: Path, split: str = "dev"):
    spec = load_benchmark_registry(benchmarks, corpora=corpora)["mine"]
    return spec, load_benchmark(spec, split)


def test_jsonl_with_gold_files_aliases_and_a_question_to_evaluate_only(tmp_path):
    benchmarks, corpora = _registries(tmp_path, _jsonl(
        {"id": "port", "question": "Which port?", "answer": ["7461", "port 7461"], "gold": ["install.md"]},
        {"id": 7, "question": "How long are snapshots kept?", "answer": "30 days", "gold": "notes.txt#0"},
        {"id": "usage", "question": "How is it used?", "gold": ["./guide/usage.md"]}))
    spec, bench = _load(benchmarks, corpora)
    # the three ids all hash to `test`: an empty half is no default split, so nothing is tuned
    assert {hash_half(q) for q in ("port", "7", "usage")} == {"test"}
    assert spec.splits == ["dev", "test"] and spec.eval_splits == ["test"] and spec.tune_split is None
    assert spec.label_split == "dev" and spec.label_limit is None   # every answered question is labelled
    assert list(bench.queries) == ["port", "7", "usage"]
    assert bench.answers == {"port": "7461", "7": "30 days"} and bench.aliases == {"port": ["port 7461"]}
    # a gold file of one chunk is that chunk; a longer one without evidence is judged at file level: the file is
    # the truth, never each of its chunks
    assert bench.qrels["port"] == {"install.md#0": 1.0} and bench.qrels["7"] == {"notes.txt#0": 1.0}
    assert bench.qrels["usage"] == {"guide/usage.md": 1.0} and bench.file_level == {"usage"}
    assert bench.gold_files == {"port": ("install.md",), "usage": ("guide/usage.md",)}
    assert {c for c, f in bench.file_of.items() if f == "guide/usage.md"} == \
        {f"guide/usage.md#{i}" for i in range(len([c for c in bench.file_of if c.startswith("guide/usage.md#")]))}
    assert bench.labelable_ids() == ["port", "7"]               # "usage" has no answer: evaluated, never labelled
    assert bench.within is None                                  # every question ranks the whole corpus


def test_a_package_corpus_takes_gold_files_with_or_without_the_package_folder(tmp_path):
    """Gold names a package's file by the path its chunks record (`networkx/algorithms/...py`) or by its path inside
    the package (`algorithms/...py`); a wrong one is refused naming the closest recorded path."""
    (tmp_path / "questions.jsonl").write_text(_jsonl(
        {"id": "a", "question": "Unweighted paths?", "gold": ["networkx/algorithms/shortest_paths/unweighted.py"]},
        {"id": "b", "question": "Unweighted paths?", "gold": ["algorithms/shortest_paths/unweighted.py"]},
        {"id": "c", "question": "From both ends?",
         "gold": ["networkx.algorithms.shortest_paths.unweighted.bidirectional_shortest_path"]}))
    corpora = tmp_path / "corpora.yaml"
    corpora.write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx",
         "options": {"subpackages": ["algorithms.shortest_paths"]}}]}))
    benchmarks = tmp_path / "benchmarks.yaml"
    benchmarks.write_text(yaml.safe_dump({"benchmarks": [
        {"name": "mine", "loader": "questions", "corpus": "default", "path": "questions.jsonl"}]}))
    _, bench = _load(benchmarks, corpora)
    module = "networkx.algorithms.shortest_paths.unweighted"
    # a file without evidence is judged at file level, under the path its chunks record
    assert bench.qrels["a"] == bench.qrels["b"] == {"networkx/algorithms/shortest_paths/unweighted.py": 1.0}
    assert bench.gold_files["b"] == ("networkx/algorithms/shortest_paths/unweighted.py",)
    file_chunks = {c for c, f in bench.file_of.items() if f == "networkx/algorithms/shortest_paths/unweighted.py"}
    assert len(file_chunks) > 5 and {module, f"{module}.bidirectional_shortest_path"} <= file_chunks
    assert bench.qrels["c"] == {f"{module}.bidirectional_shortest_path": 1.0}
    (tmp_path / "questions.jsonl").write_text(_jsonl(
        {"id": "d", "question": "Unweighted paths?", "gold": ["algorithms/shortest_paths/unweightd.py"]}))
    with pytest.raises(CorpusError, match=r"gold 'algorithms/shortest_paths/unweightd\.py' is not a document id or a "
                                          r"file of corpus 'default' \(closest: 'networkx/algorithms/shortest_paths/"
                                          r"unweighted\.py'"):
        _load(benchmarks, corpora)


def test_csv_with_a_header_several_answers_and_a_json_array_cell(tmp_path):
    csv_text = ("\ufeffid,question,answer,gold\n"
                "port,Which port?,7461|port 7461,install.md\n"
                'kept,"How long, by default?","[""30 days"", ""a month|30d""]",notes.txt|install.md\n')
    benchmarks, corpora = _registries(tmp_path, csv_text, ".csv")
    _, bench = _load(benchmarks, corpora)
    assert bench.queries == {"port": "Which port?", "kept": "How long, by default?"}
    assert bench.answers == {"port": "7461", "kept": "30 days"}
    assert bench.aliases == {"port": ["port 7461"], "kept": ["a month|30d"]}
    assert bench.qrels["kept"] == {"notes.txt#0": 1.0, "install.md#0": 1.0} and not bench.file_level


def test_evidence_makes_the_chunks_that_hold_it_the_gold_under_any_chunking(tmp_path):
    """The same evidence passage names the chunks that hold it whether the page is cut into 300- or 120-character
    chunks, also where it straddles two chunks; `metadata.evidence` is read as `evidence` is."""
    passage = "Paragraph 3: " + "word " * 10
    record = {"id": "usage", "question": "How is it used?", "answer": "word", "gold": ["guide/usage.md"]}
    found = {}
    for chunk_chars, form in ((300, "evidence"), (120, "metadata")):
        evidence = {"guide/usage.md": "  ".join(passage.split())}   # whitespace collapsed, as a reader copies it
        rec = {**record, "evidence": evidence} if form == "evidence" else {**record, "metadata": {"evidence": evidence}}
        benchmarks, corpora = _registries(tmp_path / str(chunk_chars), _jsonl(rec), chunk_chars=chunk_chars)
        spec, bench = _load(benchmarks, corpora)
        chunks = set(bench.qrels["usage"])
        assert chunks and "usage" not in bench.file_level and bench.gold_files["usage"] == ("guide/usage.md",)
        table = bench.file_of
        assert all(table[c] == "guide/usage.md" for c in chunks)
        found[chunk_chars] = chunks
    # the finer chunking needs more chunks to hold the passage's windows, never fewer
    assert len(found[120]) >= len(found[300]) >= 1


def test_evidence_that_is_not_in_its_file_is_refused_with_its_line(tmp_path):
    benchmarks, corpora = _registries(tmp_path, _jsonl(
        {"id": "port", "question": "Which port?", "answer": "7461", "gold": ["install.md"],
         "evidence": {"install.md": "the tool listens on port 9999 and nowhere else at all"}}))
    spec = load_benchmark_registry(benchmarks, corpora=corpora)["mine"]
    with pytest.raises(CorpusError, match=r"questions.jsonl:1: evidence for 'install.md' is not in that file"):
        load_benchmark(spec, "dev")
    (tmp_path / "questions.jsonl").write_text(_jsonl(
        {"id": "port", "question": "Which port?", "answer": "7461", "gold": ["install.md"],
         "evidence": {"notes.txt": "Snapshots are kept"}}))
    with pytest.raises(ConfigError, match=r"evidence names 'notes.txt', which is not one of the question's gold"):
        load_benchmark_registry(benchmarks, corpora=corpora)


def test_questions_without_gold_have_only_the_labels_as_truth(tmp_path):
    benchmarks, corpora = _registries(tmp_path, _jsonl(
        {"id": "a", "question": "Which port?", "answer": "7461"},
        {"id": "b", "question": "How long are snapshots kept?", "answer": "30 days"},
        {"id": "c", "question": "Is there an installer?", "answer": "yes"}))
    spec, bench = _load(benchmarks, corpora)
    assert bench.qrels == {} and bench.query_ids() == [] and bench.labelable_ids() == ["a", "b", "c"]
    # an eval split whose questions have neither gold nor a label to come is refused when the registry loads
    benchmarks.write_text(yaml.safe_dump({"benchmarks": [
        {"name": "mine", "loader": "questions", "corpus": "mydocs", "path": "questions.jsonl",
         "monte_carlo": {"split": "train"}}]}))
    with pytest.raises(ConfigError, match=r"eval_splits: 'test' cannot be evaluated: none of its \d+ questions has "
                                          r"'gold' documents, and none of them is labelled"):
        load_benchmark_registry(benchmarks, corpora=corpora)


def test_the_questions_own_splits_decide_and_dev_is_all(tmp_path):
    benchmarks, corpora = _registries(tmp_path, _jsonl(
        {"id": "a", "question": "Which port?", "answer": "7461", "gold": ["install.md"], "split": "tune"},
        {"id": "b", "question": "Kept how long?", "answer": "30 days", "gold": ["notes.txt"], "split": "holdout"}),
        splits=["dev", "tune", "holdout"], eval_splits=["holdout"], tune_split="tune")
    spec, dev = _load(benchmarks, corpora)
    assert list(dev.queries) == ["a", "b"]
    assert list(load_benchmark(spec, "tune").queries) == ["a"]
    assert list(load_benchmark(spec, "holdout").queries) == ["b"]


def test_splits_by_default_are_the_files_own(tmp_path):
    benchmarks, corpora = _registries(tmp_path, _jsonl(
        {"id": "a", "question": "Which port?", "answer": "7461", "gold": ["install.md"], "split": "train"},
        {"id": "b", "question": "Kept how long?", "answer": "30 days", "gold": ["notes.txt"], "split": "test"}))
    spec, _ = _load(benchmarks, corpora)
    assert spec.splits == ["dev", "train", "test"] and spec.eval_splits == ["test"]
    assert list(load_benchmark(spec, "test").queries) == ["b"]


def test_hash_halves_without_splits(tmp_path):
    ids = [f"q{i}" for i in range(12)]
    benchmarks, corpora = _registries(tmp_path, _jsonl(*({"id": q, "question": f"Question {q}?", "answer": "x",
                                                          "gold": ["install.md"]} for q in ids)))
    spec, _ = _load(benchmarks, corpora)
    assert spec.splits == ["dev", "train", "test"] and spec.eval_splits == ["test"] and spec.tune_split == "train"
    assert list(load_benchmark(spec, "train").queries) == [q for q in ids if hash_half(q) == "train"]
    assert list(load_benchmark(spec, "test").queries) == [q for q in ids if hash_half(q) == "test"]


@pytest.mark.parametrize("content, suffix, message", [
    (_jsonl({"id": "a", "question": "Q?", "answer": "x"}, {"id": "a", "question": "R?", "answer": "y"}), ".jsonl",
     r"questions\.jsonl:2: duplicate id 'a' \(first at .*questions\.jsonl:1\)"),
    ("id,question,answer\na,Q?,x\nb,R?,y\na,S?,z\n", ".csv", r"questions\.csv:4: duplicate id 'a'"),
    (_jsonl({"id": "a", "question": "Q?", "anwser": "x"}), ".jsonl",
     r"questions\.jsonl:1: unknown field 'anwser' \(fields: id, question, answer, gold, evidence, split, metadata\)"),
    (_jsonl({"id": "a", "question": "Q?"}), ".jsonl",
     r"questions\.jsonl:1: question 'a' has neither an 'answer' .* nor 'gold' documents"),
    (_jsonl({"question": "Q?", "answer": "x"}), ".jsonl", r"questions\.jsonl:1: missing field 'id'"),
    (_jsonl({"id": "a", "question": "  ", "answer": "x"}), ".jsonl", r"questions\.jsonl:1: field 'question' has no text"),
    (_jsonl({"id": "a", "question": "Q?", "answer": {"text": "x"}}), ".jsonl",
     r"questions\.jsonl:1: field 'answer' must be a string or a list of strings"),
    (_jsonl({"id": "a", "question": "Q?", "answer": "x", "split": "train"}, {"id": "b", "question": "R?",
                                                                            "answer": "y"}), ".jsonl",
     r"questions\.jsonl:2: question 'b' has no 'split' while others have one"),
    ("question,answer\nQ?,x\n", ".csv", r"questions\.csv:1: the header has no 'id' column"),
    ("id,question,answr\na,Q?,x\n", ".csv", r"questions\.csv:1: unknown column 'answr' in the header"),
    ("id,question,answer\na,Q?\n", ".csv", r"questions\.csv:2: 2 cells for the header's 3 columns"),
    ('{"id": "a", "question": "Q?", "answer": "x"\n', ".jsonl", r"questions\.jsonl:1: malformed JSON"),
    ("id,question\n", ".csv", r"questions\.csv: no questions"),
])
def test_bad_records_are_one_line_naming_file_line_and_field(tmp_path, content, suffix, message):
    from causal_assets.core.corpus.questions import load_questions

    path = tmp_path / f"questions{suffix}"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError, match=message) as e:
        load_questions(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("content, suffix, message", [
    ('{"id": "q1", "question": "Which port?", "answer": "7461", "answer": "wrong"}\n', ".jsonl",
     r"questions\.jsonl:1: key 'answer' given twice in one record"),
    ('{"id": "q0", "question": "Q?", "answer": "x"}\n{"id": "q1", "question": "Q?", "id": "q2", "answer": "x"}\n',
     ".jsonl", r"questions\.jsonl:2: key 'id' given twice in one record"),
    ('[\n  {"id": "q0", "question": "Q?", "answer": "x"},\n  {"id": "q1",\n   "question": "Which port?",\n'
     '   "question": "Which colour?", "answer": "7461"}\n]\n', ".json",
     r"questions\.json:3: key 'question' given twice in one record"),
    ('[{"id": "q0", "question": "Q?", "answer": "x"}, 7]', ".json", r"questions\.json:1: expected a JSON object, got int"),
    ('[{"id": "q0", "question": "Q?", "answer": "x"}\n{"id": "q1"}]', ".json",
     r"questions\.json:2: malformed JSON \(expected ',' or '\]' after an element\)"),
    ('[{"id": "q0", "question": "Q?", "answer": "x"}] []', ".json", r"questions\.json:1: malformed JSON \(extra data"),
])
def test_a_key_given_twice_in_a_record_is_refused_naming_file_line_and_key(tmp_path, content, suffix, message):
    """JSON keeps the last of two `answer`s (or `id`s, `question`s) silently: the question would be labelled
    against the wrong answer. In JSON Lines and in a whole-file array, the line the record starts on is named."""
    from causal_assets.core.corpus.questions import load_questions

    path = tmp_path / f"questions{suffix}"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError, match=message) as e:
        load_questions(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("content, suffix, message", [
    (_jsonl({"id": "a", "question": "Q?", "answer": "x"}, {"id": "b", "question": "Why? " * 1_000_000, "answer": "y"}),
     ".jsonl", r"questions\.jsonl:2: field 'question' is 4,999,999 characters; the limit is 2,000"),
    (_jsonl({"id": "a", "question": "Q?", "answer": ["x", "y" * 2_001]}), ".jsonl",
     r"questions\.jsonl:1: field 'answer\[1\]' is 2,001 characters; the limit is 2,000"),
    (_jsonl({"id": "a", "question": "Q?", "answer": "y" * 2_001, "gold": ["install.md"]}), ".jsonl",
     r"questions\.jsonl:1: field 'answer' is 2,001 characters"),
    ("id,question,answer\na,Q?,x\nb," + "q" * 2_001 + ",y\n", ".csv",
     r"questions\.csv:3: field 'question' is 2,001 characters; the limit is 2,000"),
])
def test_a_question_or_answer_longer_than_a_query_is_refused_at_load(tmp_path, content, suffix, message):
    """A 5 MB question was sent to the solver in every trial of its labelling; `search` and `ask` take 2,000
    characters, and so does a questions file (each accepted answer too), checked before any LLM call."""
    from causal_assets.core.corpus.questions import load_questions

    path = tmp_path / f"questions{suffix}"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError, match=message) as e:
        load_questions(path)
    assert len(str(e.value)) < 300
    at_limit = tmp_path / "at_limit.jsonl"
    at_limit.write_text(_jsonl({"id": "a", "question": "q" * 2_000, "answer": "y" * 2_000}), encoding="utf-8")
    assert len(load_questions(at_limit).records[0].question) == 2_000   # at the limit: taken


def test_a_json_array_of_questions_loads_with_each_records_line(tmp_path):
    from causal_assets.core.corpus.questions import load_questions

    path = tmp_path / "questions.json"
    path.write_text(' [\n {"id": "q0", "question": "Q?", "answer": "x"} ,\n\n {"id": "q1", "question": "R?", '
                    '"answer": ["y", "z"]}\n ]\n', encoding="utf-8")
    records = load_questions(path).records
    assert [(r.query_id, r.answers, r.where) for r in records] == [
        ("q0", ("x",), f"{path}:2"), ("q1", ("y", "z"), f"{path}:4")]
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"questions\.json: no questions"):
        load_questions(path)


def test_a_file_that_is_not_utf8_or_a_directory_or_another_format(tmp_path):
    from causal_assets.core.corpus.questions import load_questions

    path = tmp_path / "questions.jsonl"
    path.write_bytes(b'{"id": "a", "question": "caf\xe9?", "answer": "x"}\n')
    with pytest.raises(CorpusError, match=r"questions\.jsonl: not UTF-8"):
        load_questions(path)
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(CorpusError, match=r"dir\.jsonl: is a directory"):
        load_questions(tmp_path / "dir.jsonl")
    (tmp_path / "q.xlsx").write_text("x")
    with pytest.raises(CorpusError, match=r"q\.xlsx: a questions file is JSON Lines .* or CSV"):
        load_questions(tmp_path / "q.xlsx")


def test_a_jsonl_string_holding_a_line_separator_is_one_record(tmp_path):
    """JSON allows U+2028, U+2029, U+0085 and form feeds unescaped inside a string, and str.splitlines() cut the
    line at each: a valid file was refused as malformed JSON. Lines end at "\n" (and "\r\n")."""
    from causal_assets.core.corpus.questions import load_questions

    path = tmp_path / "questions.jsonl"
    records = [{"id": "a", "question": "Which port\u2028does it use?", "answer": "7461"},
               {"id": "b", "question": "Kept\u0085for\x0chow long?", "answer": "30 days\u2029"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in records), encoding="utf-8")
    loaded = load_questions(path).records
    assert [(r.query_id, r.question, r.where) for r in loaded] == [
        ("a", "Which port\u2028does it use?", f"{path}:1"), ("b", "Kept\u0085for\x0chow long?", f"{path}:2")]


@pytest.mark.parametrize("text", [_jsonl({"id": "a", "question": "Which port?", "answer": "7461"}),
                                  json.dumps([{"id": "a", "question": "Which port?", "answer": "7461"}])],
                         ids=["lines", "array"])
def test_a_jsonl_file_with_a_byte_order_mark_is_read(tmp_path, text):
    """Editors on Windows save UTF-8 with a BOM; the CSV loader took one, JSON Lines said "malformed JSON"."""
    from causal_assets.core.corpus.questions import load_questions

    path = tmp_path / "questions.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert [r.query_id for r in load_questions(path).records] == ["a"]


def test_a_fifo_or_a_device_is_not_a_regular_file_not_missing(tmp_path):
    """They exist: "questions file not found" sent the user looking for a file that was there."""
    import os

    from causal_assets.core.corpus.questions import load_questions

    os.mkfifo(tmp_path / "questions.jsonl")
    with pytest.raises(CorpusError, match=r"questions\.jsonl: not a regular file \(a FIFO\)"):
        load_questions(tmp_path / "questions.jsonl")
    with pytest.raises(CorpusError, match=r"^/dev/zero: not a regular file \(a character device\)"):
        load_questions("/dev/zero")
    with pytest.raises(CorpusError, match=r"gone\.jsonl: questions file not found"):
        load_questions(tmp_path / "gone.jsonl")


def test_a_gold_entry_the_corpus_lacks_names_the_line_and_the_closest_file(tmp_path):
    benchmarks, corpora = _registries(tmp_path, _jsonl(
        {"id": "a", "question": "Which port?", "answer": "7461", "gold": ["instal.md"]}))
    spec = load_benchmark_registry(benchmarks, corpora=corpora)["mine"]
    with pytest.raises(CorpusError, match=r"questions\.jsonl:1: gold 'instal\.md' is not a document id or a file of "
                                          r"corpus 'mydocs' \(closest: 'install\.md'"):
        load_benchmark(spec, "dev")


def test_a_split_the_registry_names_without_questions_is_refused(tmp_path):
    """`splits: [train, holdout]` gave 0 questions for `holdout`, silently; an explicit hash half left empty too."""
    records = _jsonl({"id": "port", "question": "Which port?", "answer": "7461", "gold": ["install.md"]})
    benchmarks, corpora = _registries(tmp_path, records, splits=["dev", "holdout"], eval_splits=["holdout"])
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]\.splits: 'holdout' has no question in .*questions\.jsonl: "
                                          r"the stable hash halves put 0 of the 1 questions in train and 1 in test"):
        load_benchmark_registry(benchmarks, corpora=corpora)
    benchmarks, corpora = _registries(tmp_path, records, splits=["dev", "train", "test"], eval_splits=["test"])
    with pytest.raises(ConfigError, match=r"splits: 'train' has no question"):
        load_benchmark_registry(benchmarks, corpora=corpora)


def test_the_shipped_example_is_a_valid_benchmark():
    """The tutorial's folder and questions (docs/tutorial.md): 9 questions, 8 with answers, every one with a gold
    page of the folder."""
    spec = load_benchmark_registry(EXAMPLE / "benchmarks.yaml", corpora=EXAMPLE / "corpora.yaml")["brindle"]
    bench = load_benchmark(spec, "dev")
    assert len(bench.queries) == 9 and len(bench.labelable_ids()) == 8
    pages = {p.name for p in (EXAMPLE / "docs").glob("*.md")}
    assert len(pages) >= 6
    assert all(len(g) == 1 and next(iter(g)).split("#")[0] in pages for g in bench.qrels.values())
    assert load_benchmark(spec, "test").labelable_ids()   # the held-out half has labelled questions too


def test_a_cut_shorter_than_the_corpus_chunks_is_warned_about_when_the_registry_loads(tmp_path):
    from causal_assets.core.foundation.errors import RegistryWarning

    question = _jsonl({"id": "port", "question": "Which port?", "answer": "7461", "gold": ["install.md"]})
    benchmarks, corpora = _registries(tmp_path, question, chunk_chars=1500, pooling={"max_doc_chars": 600})
    with pytest.warns(RegistryWarning, match=r"benchmark 'mine': the solver reads 600 characters of each document "
                                             r"\(pooling.max_doc_chars\), fewer than corpus 'mydocs''s chunks of up "
                                             r"to 1500"):
        load_benchmark_registry(benchmarks, corpora=corpora)
    # the default: each document's share of the solver's context, whole for these chunks
    benchmarks, corpora = _registries(tmp_path / "b", question, chunk_chars=1500)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegistryWarning)
        load_benchmark_registry(benchmarks, corpora=corpora)
