"""The Python loader's chunks hold every line of a file: class attributes, module constants, `__all__`, `if __name__`
blocks and the tail of a long function included, long units cut into parts the code graph and the mined benchmark
still read as one symbol. On a synthetic file and on real installed packages (networkx, the standard library's)."""
from __future__ import annotations

import io
import json

import pytest

from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.corpus.python_package import (chunk_python_source, join_parts, load_python_package,
                                                      package_root)
from causal_assets.core.graph.code_graph import build_code_graph
from causal_assets.core.graph.store import chunk_neighbors

STEPS = 300
SOURCE = '''"""A command-line tool's errors and its entry point."""
from __future__ import annotations

import sys

__all__ = ["UsageError", "helper", "long_function", "main"]

DEFAULT_TIMEOUT = 30
RETRIES: int = 3  # how often a request is tried


class UsageError(Exception):
    """The command line was wrong."""
    exit_code = 2
    hint: str = "see --help"

    def __init__(self, message):
        super().__init__(message)
        self.message = message


def helper(x):
    return x + 1


def long_function(x):
    """Add up a long computation, one step a line."""
    total = 0
''' + "".join(f"    total += x * {i:3d}  # accumulate the step number {i:3d} of the computation\n"
              for i in range(STEPS)) + '''    return helper(total)


def main():
    raise UsageError("no arguments")


if __name__ == "__main__":
    sys.exit(main())
'''


def uncovered(chunks, source: str) -> list[tuple[int, str]]:
    """(line number, line) of every non-blank line of `source` that no chunk holds whole, inside its line span."""
    held: dict[int, set[str]] = {}
    for c in chunks:
        for line in c.text.splitlines():
            if line.strip():
                for n in range(c.start_line, c.end_line + 1):
                    held.setdefault(n, set()).add(line.strip())
    lines = io.StringIO(source, newline="").readlines()
    return [(n, line.rstrip()) for n, line in enumerate(lines, 1)
            if line.strip() and line.strip() not in held.get(n, ())]


def parts_of(chunks, chunk_id: str):
    return [c for c in chunks if c.chunk_id == chunk_id or c.metadata.get("part_of") == chunk_id]


@pytest.fixture(scope="module")
def tool_chunks():
    return chunk_python_source(SOURCE, "tool", "tool.py", "t")


def test_every_line_of_a_file_is_in_a_chunk(tool_chunks):
    assert uncovered(tool_chunks, SOURCE) == []
    by_id = {c.chunk_id: c for c in tool_chunks}
    error = by_id["tool.UsageError"]
    # the class holds its attributes and its methods' signatures; a method's body is only in the method's chunk
    assert "    exit_code = 2\n" in error.text and 'hint: str = "see --help"' in error.text
    assert "    def __init__(self, message): ..." in error.text and "self.message" not in error.text
    assert "self.message = message" in by_id["tool.UsageError.__init__"].text
    module = by_id["tool"]
    for line in ('__all__ = ["UsageError", "helper", "long_function", "main"]', "DEFAULT_TIMEOUT = 30",
                 "RETRIES: int = 3  # how often a request is tried", 'if __name__ == "__main__":',
                 "    sys.exit(main())", "import sys", "def long_function(x): ..."):
        assert line in module.text, line
    assert "total +=" not in module.text
    assert (module.start_line, module.end_line) == (1, SOURCE.count("\n"))


def test_a_long_function_is_cut_into_consecutive_parts(tool_chunks):
    parts = parts_of(tool_chunks, "tool.long_function")
    assert len(parts) >= 8 and all(len(p.text) <= 1500 for p in parts)
    assert [p.chunk_id for p in parts] == ["tool.long_function"] + [f"tool.long_function#part{k}"
                                                                     for k in range(2, len(parts) + 1)]
    assert all(p.kind == "function" and p.title == "tool.long_function" for p in parts)
    assert [p.metadata["part"] for p in parts] == list(range(1, len(parts) + 1))
    lines = SOURCE.splitlines(keepends=True)
    first = next(n for n, line in enumerate(lines, 1) if line.startswith("def long_function"))
    last = next(n for n, line in enumerate(lines, 1) if "return helper(total)" in line)
    assert (parts[0].start_line, parts[-1].end_line) == (first, last)
    for a, b in zip(parts, parts[1:]):
        assert b.start_line <= a.end_line + 1 and b.metadata["char_start"] < a.metadata["char_end"]
    # each part's text is the file's lines it says it spans; the parts rebuild the function exactly
    for p in parts:
        assert "".join(lines[p.start_line - 1:p.end_line]).startswith(p.text)
    whole = join_parts([(p.metadata["char_start"], p.text) for p in parts])
    assert whole == "".join(lines[first - 1:last])
    assert "signature" in parts[0].metadata and "signature" not in parts[1].metadata


def test_the_code_graph_reads_a_long_function_whole(tool_chunks):
    nodes, edges = build_code_graph(chunks_to_frame(tool_chunks))
    calls = edges[edges["edge_type"] == "calls"].set_index(["source", "target"])
    # the call on the function's last line, in its last part
    last = next(n for n, line in enumerate(SOURCE.splitlines(), 1) if "return helper(total)" in line)
    assert calls.loc[("tool.long_function", "tool.helper"), "evidence"] == f"L{last}: helper(...)"
    parts = parts_of(tool_chunks, "tool.long_function")
    part_nodes = nodes[nodes["node_type"] == "part"]
    assert sorted(part_nodes["chunk_id"]) == sorted(p.chunk_id for p in parts[1:])
    has_part = edges[edges["edge_type"] == "has_part"]
    assert set(has_part["source"]) == {"tool.long_function"} and len(has_part) == len(parts) - 1
    assert ("tool.long_function", "part_of", 1.0) in chunk_neighbors(nodes, edges)(parts[-1].chunk_id)


@pytest.mark.parametrize("package, subpackages", [
    ("networkx", ["classes", "algorithms.shortest_paths", "utils", "readwrite"]), ("json", None), ("email", None)])
def test_every_line_of_an_installed_package_is_in_a_chunk(package, subpackages):
    chunks, report = load_python_package(package, "t", subpackages=subpackages)
    assert report["files"] >= 5 and max(len(c.text) for c in chunks) <= 1500
    root = package_root(package).parent
    by_path: dict[str, list] = {}
    for c in chunks:
        by_path.setdefault(c.path, []).append(c)
    for path, file_chunks in by_path.items():
        assert uncovered(file_chunks, (root / path).read_text(encoding="utf-8")) == [], path


def test_the_mined_targets_are_first_parts_without_their_summary():
    """The default corpus (networkx, summaries masked): each mined question's target is the first part of its
    function or class, and no part of the target holds the summary the question was made from."""
    from causal_assets.core.corpus.mining import mine_questions

    chunks, _ = load_python_package("networkx", "default", subpackages=["algorithms.shortest_paths"],
                                    mask_summaries=True)
    questions = mine_questions(chunks_to_frame(chunks), "networkx")
    assert len(questions) > 30
    by_id = {c.chunk_id: c for c in chunks}
    split = 0
    for q in questions:
        target = by_id[q.target_chunk_id]
        assert q.target_chunk_id == q.gold_fqn and target.metadata.get("part", 1) == 1
        parts = parts_of(chunks, q.target_chunk_id)
        split += len(parts) > 1
        summary = " ".join(q.summary.split())
        assert not any(summary in " ".join(p.text.split()) for p in parts), q.gold_fqn
        assert json.dumps(target.metadata["summary"]) == json.dumps(q.summary)
    assert split > 10   # most of networkx's documented functions are longer than a part


def test_part_size_is_an_option():
    small = chunk_python_source(SOURCE, "tool", "tool.py", "t", chunk_chars=600, overlap_chars=0)
    assert max(len(c.text) for c in small) <= 600 and uncovered(small, SOURCE) == []
    big = chunk_python_source(SOURCE, "tool", "tool.py", "t", chunk_chars=100_000, overlap_chars=0)
    assert [c.chunk_id for c in big] == ["tool", "tool.UsageError", "tool.UsageError.__init__", "tool.helper",
                                         "tool.long_function", "tool.main"]


def test_part_size_is_a_registry_option(tmp_path):
    from causal_assets.core.registry.corpora import load_corpus, load_corpus_registry

    registry = tmp_path / "corpora.yaml"
    registry.write_text("corpora:\n  - name: default\n    loader: python_package\n    package: networkx\n"
                        "    options: {subpackages: [algorithms.shortest_paths], chunk_chars: 2500, overlap_chars: 0}\n")
    chunks, _ = load_corpus(load_corpus_registry(registry)["default"])
    assert 2000 < max(len(c.text) for c in chunks) <= 2500
    for c in chunks:   # no overlap: a part starts where the one before it ended
        if c.metadata.get("part", 1) > 1:
            before = next(p for p in chunks if p.metadata.get("char_end") == c.metadata["char_start"]
                          and p.title == c.title)
            assert before.metadata["part"] == c.metadata["part"] - 1
