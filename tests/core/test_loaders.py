"""Corpus loaders on real data, and the one clear error each kind of bad input gets."""
from __future__ import annotations

import ast
import json
import os

import pytest

from causal_assets.core.registry.benchmarks import BenchmarkSpec
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.corpus.beir import load_beir_corpus, load_beir_qrels, load_beir_queries
from causal_assets.core.corpus.chunk import chunks_to_frame, frame_to_chunks
from causal_assets.core.corpus.folder import load_folder, split_with_overlap
from causal_assets.core.corpus.hotpotqa import load_hotpotqa
from causal_assets.core.corpus.python_package import load_python_package, package_root
from causal_assets.core.registry.corpora import load_corpus_registry
from causal_assets.core.foundation.errors import ConfigError, CorpusError
from tests.conftest import HOTPOT, SCIFACT, require


def test_python_package_chunks_have_fqn_signature_and_exact_span():
    chunks, report = load_python_package("networkx", "t", subpackages=["algorithms.shortest_paths"])
    by_id = {c.chunk_id: c for c in chunks}
    fn = by_id["networkx.algorithms.shortest_paths.generic.shortest_path"]
    assert fn.kind == "function"
    assert fn.metadata["signature"].startswith("def shortest_path(G, source=None, target=None")
    assert "Compute shortest paths in the graph" in fn.metadata["docstring"]
    src = (package_root("networkx") / "algorithms/shortest_paths/generic.py").read_text().splitlines(keepends=True)
    node = next(n for n in ast.parse("".join(src)).body if getattr(n, "name", "") == "shortest_path")
    # the span runs from the first decorator to the last line, over the function's parts
    parts = [c for c in chunks if c.chunk_id == fn.chunk_id or c.metadata.get("part_of") == fn.chunk_id]
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    assert (parts[0].start_line, parts[-1].end_line) == (first, node.end_lineno)
    assert fn.text.startswith("".join(src[first - 1:node.lineno])) and "def shortest_path(" in fn.text
    kinds = {c.kind for c in chunks}
    assert {"module", "function"} <= kinds
    assert report["files"] > 5 and report["skipped_unparsable"] == 0
    assert not any("tests" in c.path.split("/") for c in chunks)


def test_python_package_missing():
    with pytest.raises(CorpusError, match="'no_such_pkg_xyz' is not installed"):
        load_python_package("no_such_pkg_xyz", "t")


def test_beir_scifact_full_corpus_and_qrels():
    folder = require(SCIFACT)
    chunks = load_beir_corpus(folder, "scifact")
    assert len(chunks) == 5183
    queries = load_beir_queries(folder)
    qrels = load_beir_qrels(folder, "test", {c.chunk_id for c in chunks}, set(queries))
    assert len(qrels) == 300 and sum(len(v) for v in qrels.values()) == 339
    assert sum(len(v) for v in load_beir_qrels(folder, "train").values()) == 919


def test_chunk_frame_roundtrip():
    chunks = load_beir_corpus(require(SCIFACT), "scifact")[:20]
    assert frame_to_chunks(chunks_to_frame(chunks)) == chunks


def _beir(tmp_path, corpus_lines, qrels="query-id\tcorpus-id\tscore\n"):
    (tmp_path / "qrels").mkdir(exist_ok=True)
    (tmp_path / "corpus.jsonl").write_bytes(corpus_lines if isinstance(corpus_lines, bytes) else corpus_lines.encode())
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "a question"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text(qrels)
    return tmp_path


@pytest.mark.parametrize("content, message", [
    ('{"_id": "1", "text": "ok"}\n{"_id": "2", "text": \n', r"corpus.jsonl:2: malformed JSON"),
    ('{"_id": "1", "text": "ok"}\n{"title": "no id", "text": "x"}\n', r"corpus.jsonl:2: missing field '_id'"),
    ('{"_id": "1", "text": "ok"}\n{"_id": "1", "text": "again"}\n', r"corpus.jsonl:2: duplicate _id '1'"),
    ('["not", "an object"]\n', r"corpus.jsonl:1: expected a JSON object"),
    ('\n\n', r"corpus.jsonl: corpus is empty"),
    (b'{"_id": "1", "text": "caf\xe9"}\n', r"corpus.jsonl: not UTF-8"),
    ('{"_id": "1", "text": "ok"}\n{"_id": "d1", "text": "   "}\n', r"corpus.jsonl:2: document 'd1' has neither text"),
    ('{"_id": "d2", "text": null}\n', r"corpus.jsonl:1: document 'd2' has neither text nor title"),
    ('{"_id": "d3", "text": {"a": 1}}\n', r"corpus.jsonl:1: field 'text' is a JSON object, not text"),
])
def test_beir_bad_corpus(tmp_path, content, message):
    with pytest.raises(CorpusError, match=message):
        load_beir_corpus(_beir(tmp_path, content), "bad")


def test_beir_null_texts_are_empty_not_none_and_a_query_needs_text(tmp_path):
    folder = _beir(tmp_path, '{"_id": "d1", "title": "A title", "text": null}\n{"_id": "d2", "title": null, "text": 7}\n')
    assert [(c.title, c.text) for c in load_beir_corpus(folder, "nulls")] == [("A title", ""), ("", "7")]
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "a question"}\n{"_id": "q2", "text": null}\n')
    with pytest.raises(CorpusError, match=r"queries.jsonl:2: query 'q2' has no text"):
        load_beir_queries(folder)


def test_beir_bad_qrels(tmp_path):
    folder = _beir(tmp_path, '{"_id": "1", "text": "ok"}\n', "query-id\tcorpus-id\tscore\nq1\t999\t1\n")
    with pytest.raises(CorpusError, match=r"test.tsv:2: corpus-id '999' is not a document of the corpus"):
        load_beir_qrels(folder, "test", {"1"}, {"q1"})
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t1\tone\n")
    with pytest.raises(CorpusError, match=r"test.tsv:2: score 'one' is not a number"):
        load_beir_qrels(folder, "test")
    with pytest.raises(CorpusError, match=r"dev.tsv: file not found \(splits here: \['test'\]\)"):
        load_beir_qrels(folder, "dev")


@pytest.mark.parametrize("corpus_line, message", [
    ('{"_id": null, "text": "x"}', r"corpus.jsonl:1: field '_id' must be a string or an integer id, got JSON null"),
    ('{"_id": ["x"], "text": "x"}', r"field '_id' must be a string or an integer id, got JSON array"),
    ('{"_id": true, "text": "x"}', r"field '_id' must be a string or an integer id, got JSON boolean"),
    ('{"_id": 1.5, "text": "x"}', r"field '_id' must be a string or an integer id, got JSON number"),
    ('{"_id": " ", "text": "x"}', r"field '_id' is a blank id"),
    ('{"_id": "d1", "text": "fever \\ud800"}', r"corpus.jsonl:1: field 'text' holds an unpaired surrogate"),
    ('{"_id": "d1", "text": ' + "[" * 100_000 + "]" * 100_000 + "}", r"corpus.jsonl:1: JSON nested too deeply"),
    # (a second probe) a bare ValueError naming no file; NaN became the text "nan"
    ('{"_id": ' + "9" * 5000 + ', "text": "x"}', r"corpus.jsonl:1: malformed JSON \(Exceeds the limit"),
    ('{"_id": "d1", "text": NaN}', r"corpus.jsonl:1: malformed JSON \(NaN is not a JSON value\)"),
])
def test_beir_ids_and_texts_are_typed(tmp_path, corpus_line, message):
    """An id that is not a string or an integer became the chunk id 'None' or "['x']"; a lone surrogate passed
    the loader and failed the evaluation's fourth output after three were written; deep nesting was a bare
    RecursionError."""
    with pytest.raises(CorpusError, match=message):
        load_beir_corpus(_beir(tmp_path, corpus_line + "\n"), "bad")
    assert [c.chunk_id for c in load_beir_corpus(_beir(tmp_path, '{"_id": 7, "text": "x"}\n'), "ok")] == ["7"]


def test_beir_qrels_are_plain_tab_separated_lines(tmp_path):
    """A corpus-id starting with a quote swallowed the next judgement under csv quoting; a field over 128 KB and a
    file that is not UTF-8 were bare csv / codec errors."""
    folder = _beir(tmp_path, '{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": "b"}\n',
                   'query-id\tcorpus-id\tscore\nq1\t"d1\t1\nq2\td2\t1\n')
    assert load_beir_qrels(folder, "test") == {"q1": {'"d1': 1.0}, "q2": {"d2": 1.0}}
    with pytest.raises(CorpusError, match=r"test.tsv:2: corpus-id '\"d1' is not a document of the corpus"):
        load_beir_qrels(folder, "test", {"d1", "d2"})
    (folder / "qrels" / "test.tsv").write_text("q1\t" + "x" * 200_000 + "\t1\n")
    with pytest.raises(CorpusError, match=r"test.tsv:1: corpus-id 'x+' is not a document of the corpus"):
        load_beir_qrels(folder, "test", {"d1", "d2"})
    (folder / "qrels" / "test.tsv").write_bytes(b"q1\td1\t1\nq2\t\xff\t1\n")
    with pytest.raises(CorpusError, match=r"test.tsv: not UTF-8"):
        load_beir_qrels(folder, "test")


def test_a_beir_benchmark_refuses_judgements_of_documents_the_corpus_lacks(tmp_path):
    """load_benchmark passed only the query ids: a judgement of a missing document was kept silently and lowered
    recall (0.75 where every document was found)."""
    folder = _beir(tmp_path, '{"_id": "d1", "text": "a"}\n', "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tNOPE\t1\n")
    spec = BenchmarkSpec(name="b", loader="beir", corpus="c", path=str(folder), splits=["test"],
                         eval_splits=["test"])
    with pytest.raises(CorpusError, match=r"test.tsv:3: corpus-id 'NOPE' is not a document of the corpus"):
        load_benchmark(spec, "test")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert load_benchmark(spec, "test").qrels == {"q1": {"d1": 1.0}}


def test_a_missing_path_or_a_file_given_for_a_folder_is_named(tmp_path):
    with pytest.raises(CorpusError, match=f"{tmp_path}/nope/corpus.jsonl: file not found"):
        load_beir_corpus(tmp_path / "nope", "x")
    with pytest.raises(CorpusError, match="folder not found"):
        load_folder(tmp_path / "nope", "x")
    # a path that exists but is no folder: said to be "not found", sending the user to look for it
    (tmp_path / "notes.md").write_text("# Notes\n")
    with pytest.raises(CorpusError, match=r"notes\.md: is a file, not a folder"):
        load_folder(tmp_path / "notes.md", "x")
    with pytest.raises(CorpusError, match=r"^/dev/null: is a character device, not a folder"):
        load_folder("/dev/null", "x")


def test_hotpotqa_real_paragraphs_and_gold_flags():
    chunks, questions = load_hotpotqa(require(HOTPOT), "hotpotqa")
    assert len(questions) == 200 and len(chunks) == 200 * 10 - 8  # 8 real questions have 9 paragraphs
    q = questions[0]
    gold = [c for c in chunks if c.metadata["query_id"] == q.query_id and c.metadata["supporting"]]
    assert sorted(c.title for c in gold) == sorted(q.supporting_titles)
    assert all(c.text for c in chunks)


def test_hotpotqa_bad_record(tmp_path):
    bad = tmp_path / "h.jsonl"
    bad.write_text(json.dumps({"_id": "a", "question": "q", "context": [["T", "not a list"]]}) + "\n")
    with pytest.raises(CorpusError, match=r"h.jsonl:1: context\[0\] must be \[title, \[sentences\]\]"):
        load_hotpotqa(bad, "h")
    bad.write_text('{"_id": "a", "question": "q"}\n')
    with pytest.raises(CorpusError, match=r"h.jsonl:1: missing field 'context'"):
        load_hotpotqa(bad, "h")


@pytest.mark.parametrize("change, message", [
    ({"_id": None}, r"h.jsonl:1: field '_id' must be a string or an integer id, got JSON null"),
    ({"question": None}, r"h.jsonl:1: field 'question' has no text"),
    ({"answer": ["x", "y"]}, r"h.jsonl:1: field 'answer' is a JSON array, not text"),
    ({"context": [["T", [{"a": 1}]]]}, r"h.jsonl:1: field 'context\[0\] sentence 0' is a JSON object, not text"),
    ({"context": [[None, ["s."]]]}, r"supporting_facts title 'T' is not a context paragraph"),
])
def test_hotpotqa_fields_are_typed(tmp_path, change, message):
    """null, a list or an object became the texts "None", "['x', 'y']" and "{'a': 1}", and an id `None/0`."""
    record = {"_id": "a", "question": "q?", "answer": "x", "supporting_facts": [["T", 0]],
              "context": [["T", ["A sentence."]]]}
    bad = tmp_path / "h.jsonl"
    bad.write_text(json.dumps(record | change) + "\n")
    with pytest.raises(CorpusError, match=message):
        load_hotpotqa(bad, "h")


def test_hotpotqa_duplicate_query_id_is_named(tmp_path):
    record = {"_id": "a", "question": "q?", "answer": "x", "supporting_facts": [["T", 0]],
              "context": [["T", ["A sentence."]]]}
    bad = tmp_path / "h.jsonl"
    bad.write_text(json.dumps(record) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(CorpusError, match=r"h.jsonl:2: duplicate _id 'a'"):
        load_hotpotqa(bad, "h")


def test_beir_a_key_given_twice_in_a_record_is_refused(tmp_path):
    """`"text": "ok", "text": "other"` loaded as "other" (JSON keeps the last value, silently), in the corpus and in
    the queries alike: refused naming file, line and key, as a questions file's loader does."""
    folder = _beir(tmp_path, '{"_id": "1", "text": "ok"}\n{"_id": "2", "text": "ok", "text": "other"}\n')
    with pytest.raises(CorpusError, match=r"corpus.jsonl:2: key 'text' given twice in one record"):
        load_beir_corpus(folder, "twice")
    folder = _beir(tmp_path, '{"_id": "1", "text": "ok"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "_id": "q2", "text": "a question"}\n')
    with pytest.raises(CorpusError, match=r"queries.jsonl:1: key '_id' given twice in one record"):
        load_beir_queries(folder)


@pytest.mark.parametrize("layout", ["jsonl", "array"])
def test_hotpotqa_a_key_given_twice_in_a_record_is_refused(tmp_path, layout):
    """`"answer": "x", "answer": "y"` loaded with the answer "y" (JSON keeps the last value, silently): refused naming
    file, line and key, in JSON Lines and in a whole-file JSON array (the line its record starts on). 2Wiki and
    MuSiQue files are read by the same function."""
    record = {"_id": "a", "question": "q?", "answer": "x", "supporting_facts": [["T", 0]],
              "context": [["T", ["A sentence."]]]}
    twice = json.dumps(record | {"_id": "b"}).replace('"answer": "x"', '"answer": "x", "answer": "y"')
    bad = tmp_path / f"h.{'jsonl' if layout == 'jsonl' else 'json'}"
    bad.write_text(json.dumps(record) + "\n" + twice + "\n" if layout == "jsonl" else
                   "[\n" + json.dumps(record) + ",\n" + twice + "\n]\n")
    line = 2 if layout == "jsonl" else 3
    with pytest.raises(CorpusError, match=rf"h.jsonl?:{line}: key 'answer' given twice in one record"):
        load_hotpotqa(bad, "h")
    bad.write_text(bad.read_text().replace('"answer": "x", "answer": "y"', '"answer": "y"'))
    assert [q.answer for q in load_hotpotqa(bad, "h")[1]] == ["x", "y"]


def test_split_with_overlap_covers_text_with_overlap():
    text = "\n\n".join(f"Paragraph {i}. " + "word " * 60 for i in range(20))
    spans = split_with_overlap(text, 500, 100)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
        assert s2 < e1 and e1 - s2 <= 100  # overlapping, by at most the overlap
        assert e1 - s1 <= 500
        assert text[s2 - 1] in " \n" and text[s2] != " "   # starting at a word, not inside one ("xist` |")
    with pytest.raises(ValueError):
        split_with_overlap(text, 100, 100)


def test_folder_skips_bad_files_and_reports_them(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "guide.md").write_text("# Guide\n\n" + "Install the package and run it. " * 100)
    (root / "mod.py").write_text("def add(a, b):\n    '''Add two numbers.'''\n    return a + b\n")
    (root / "blob.txt").write_bytes(b"abc\x00\x01\x02" * 10)
    (root / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (root / "huge.txt").write_text("x" * 5000)
    outside = tmp_path / "secret.txt"
    outside.write_text("outside the root")
    os.symlink(outside, root / "link.txt")
    chunks, report = load_folder(root, "docs", chunk_chars=800, overlap_chars=100, max_file_bytes=4000)
    assert report["skipped_binary"] == 1 and report["skipped_undecodable"] == 1
    assert report["skipped_oversize"] == 1 and report["skipped_outside_root"] == 1
    assert any("link.txt" in s for s in report["skipped"])
    assert not any("outside the root" in c.text for c in chunks)
    md = [c for c in chunks if c.path == "guide.md"]
    assert len(md) >= 4 and md[0].start_line == 1
    assert any(c.chunk_id == "mod.add" and c.kind == "function" for c in chunks)


def test_folder_python_files_with_the_same_module_name_are_both_kept(tmp_path):
    """pkg/mod.py and pkg.mod.py both chunk as module pkg.mod: the whole corpus was refused over "duplicate chunk
    ids", naming neither file. The second is chunked as text and reported."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text('def f():\n    """F."""\n    return 1\n')
    (tmp_path / "pkg.mod.py").write_text('def g():\n    """G."""\n    return 2\n')
    chunks, report = load_folder(tmp_path, "clash")
    ids = [c.chunk_id for c in chunks]
    assert len(ids) == len(set(ids))
    assert "pkg.mod.f" in ids and "pkg.mod.py#0" in ids and "def g()" in chunks[ids.index("pkg.mod.py#0")].text
    assert report["skipped_name_clash"] == 1
    assert any(s.startswith("pkg.mod.py: ") and "pkg/mod.py" in s for s in report["skipped"])
    # a text window's id `a.md#0` is also the name of module `a.md#0` (a second probe): the Python file is text
    (tmp_path / "a.md").write_text("notes\n")
    (tmp_path / "a.md#0.py").write_text('def g():\n    return 2\n')
    chunks, report = load_folder(tmp_path, "clash")
    ids = [c.chunk_id for c in chunks]
    assert len(ids) == len(set(ids)) and {"a.md#0", "a.md#0.py#0"} <= set(ids) and report["skipped_name_clash"] == 2


def test_folder_with_nothing_readable(tmp_path):
    (tmp_path / "a.bin.txt").write_bytes(b"\x00\x00")
    with pytest.raises(CorpusError, match="no readable text files"):
        load_folder(tmp_path, "x")


def test_registry_errors_name_file_and_field(tmp_path):
    p = tmp_path / "corpora.yaml"
    p.write_text("corpora:\n  - name: default\n    loader: python_package\n    package: networkx\n  - name: x\n    loader: beir\n")
    with pytest.raises(ConfigError, match=r"corpora.yaml: corpora\[1\].*needs 'path'"):
        load_corpus_registry(p)
    p.write_text("corpora:\n  - name: default\n    loader: [unclosed\n")
    with pytest.raises(ConfigError, match=r"corpora.yaml:\d+: malformed YAML"):
        load_corpus_registry(p)
    p.write_text("corpora:\n  - name: Bad-Name\n    loader: folder\n    path: /tmp\n")
    with pytest.raises(ConfigError, match=r"corpora\[0\].name: String should match pattern"):
        load_corpus_registry(p)


@pytest.mark.parametrize("entry, message", [
    # a misspelt option was ignored; an unknown keyword failed the build with a TypeError; "false" was true
    ("loader: beir\n    path: /tmp\n    options: {split_identifers: true}",
     r"corpora\[1\].*unknown option 'split_identifers' for loader beir \(its options: split_identifiers\)"),
    ("loader: folder\n    path: /tmp\n    options: {chunk_char: 500}",
     r"unknown option 'chunk_char' for loader folder \(its options: chunk_chars, max_file_bytes, overlap_chars, "),
    ("loader: beir\n    path: /tmp\n    options: {split_identifiers: 'false'}",
     r"option 'split_identifiers' must be true or false, not 'false'"),
    # the last of two keys silently won
    ("loader: folder\n    path: /tmp\n    path: /etc", r"corpora.yaml:8: malformed YAML \(duplicate key 'path'\)"),
    # folder sizes: a string or a fraction failed the build with a bare TypeError; negative sizes wrote empty chunks
    ("loader: folder\n    path: /tmp\n    options: {chunk_chars: '1500'}",
     r"corpora\[1\].*option 'chunk_chars' is '1500': input should be a valid integer"),
    ("loader: folder\n    path: /tmp\n    options: {chunk_chars: 1500.5}",
     r"option 'chunk_chars' is 1500.5: input should be a valid integer"),
    ("loader: folder\n    path: /tmp\n    options: {chunk_chars: -10, overlap_chars: -20}",
     r"option 'chunk_chars' is -10: input should be greater than 0"),
    ("loader: folder\n    path: /tmp\n    options: {overlap_chars: -20}",
     r"option 'overlap_chars' is -20: input should be greater than or equal to 0"),
    ("loader: folder\n    path: /tmp\n    options: {chunk_chars: 200, overlap_chars: 200}",
     r"option 'overlap_chars' \(200\) must be smaller than 'chunk_chars' \(200\)"),
    ("loader: folder\n    path: /tmp\n    options: {overlap_chars: 1500}",
     r"option 'overlap_chars' \(1500\) must be smaller than 'chunk_chars' \(1500\)"),   # against the default
    # a chunk of a billion characters is no chunk, a file of 10**30 bytes no limit
    ("loader: folder\n    path: /tmp\n    options: {chunk_chars: 1000000000}",
     r"option 'chunk_chars' is 1000000000: input should be less than or equal to 100000"),
    ("loader: folder\n    path: /tmp\n    options: {max_file_bytes: 1000000000000000000000000000000}",
     r"option 'max_file_bytes' is 1000000000000000000000000000000: input should be less than or equal to 1000000000"),
    ("loader: folder\n    path: /tmp\n    options: {max_file_bytes: true}",
     r"option 'max_file_bytes' is True: input should be a valid integer"),
    ("loader: folder\n    path: /tmp\n    options: {suffixes: .md}", r"option 'suffixes' is '.md': input should be a valid"),
    ("loader: python_package\n    package: networkx\n    options: {subpackages: algorithms}",
     r"option 'subpackages' is 'algorithms': input should be a valid"),
    # the Python loader's parts are sized like the folder's windows, checked alike
    ("loader: python_package\n    package: networkx\n    options: {chunk_chars: '2000'}",
     r"option 'chunk_chars' is '2000': input should be a valid integer"),
    ("loader: python_package\n    package: networkx\n    options: {chunk_chars: 300, overlap_chars: 300}",
     r"option 'overlap_chars' \(300\) must be smaller than 'chunk_chars' \(300\)"),
])
def test_registry_options_and_keys_are_checked(tmp_path, entry, message):
    p = tmp_path / "corpora.yaml"
    p.write_text(f"corpora:\n  - name: default\n    loader: python_package\n    package: networkx\n"
                 f"  - name: x\n    {entry}\n")
    with pytest.raises(ConfigError, match=message):
        load_corpus_registry(p)
    p.write_text(f"corpora:\n  - name: x\n    loader: folder\n    path: /tmp\n    options: {{chunk_chars: 500}}\n"
                 f"  - name: default\n    loader: python_package\n    package: networkx\n")
    assert load_corpus_registry(p)["x"].options == {"chunk_chars": 500}
    p.write_text(f"corpora:\n  - name: x\n    loader: folder\n    path: /tmp\n    options: {{chunk_chars: 500, "
                 f"overlap_chars: 0, suffixes: [.md, .txt]}}\n"
                 f"  - name: default\n    loader: python_package\n    package: networkx\n")
    assert load_corpus_registry(p)["x"].options["suffixes"] == [".md", ".txt"]


def test_shipped_registry_is_valid():
    specs = load_corpus_registry()
    assert specs["default"].available()
    assert {"scifact", "cosqa", "hotpotqa"} <= set(specs)


def test_folder_counts_and_lists_fifos_and_blank_files(tmp_path):
    """A FIFO, an empty file and a whitespace-only file were skipped without a word in the load report."""
    from causal_assets.core.corpus.folder import load_folder

    (tmp_path / "good.md").write_text("# Paths\n\nDijkstra finds shortest paths.\n")
    os.mkfifo(tmp_path / "pipe.md")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.md").write_text("  \n\n\t\n")
    chunks, report = load_folder(tmp_path, "notes")
    assert [c.path for c in chunks] == ["good.md"] and report["files"] == 1
    assert report["skipped_not_regular"] == 1 and report["skipped_blank"] == 2
    assert sorted(report["skipped"]) == ["blank.md: empty or only whitespace", "empty.txt: empty file",
                                         "pipe.md: not a regular file (a FIFO)"]
