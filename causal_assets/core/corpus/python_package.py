"""Chunks from an installed Python package's source tree, parsed with `ast` (never imported or executed).

Every line of a file is in a chunk. A function's or method's chunk is its source, from its first decorator to its
last line, nested functions included. A class's chunk and a module's chunk are their own source with each function
and class they contain cut to a one-line stub (its signature): those have chunks of their own. So class attributes
(an exception's `exit_code = 2`), module constants, `__all__`, `if __name__ == "__main__":` blocks, comments and
any other statement between definitions are in the class's or module's chunk, and a method's body is in one chunk,
not also in its class's (the class would repeat every method and be ranked for what the methods do).

A unit longer than `chunk_chars` is cut into parts by the folder loader's splitter (`split.split_with_overlap`:
breaks at blank lines or line ends, `overlap_chars` of overlap). Part 1 keeps the unit's id (its FQN, what mined
questions and graph nodes name); part k is `<id>#part<k>`. Each part records `part`, `parts` and its characters in
the unit's text (`char_start`, `char_end`); later parts carry `part_of`, the first part's id, and `join_parts`
rebuilds the whole text (the code graph parses whole functions). A chunk's `start_line`..`end_line` are the file
lines its text comes from.
"""
from __future__ import annotations

import ast
import importlib.util
import io
import logging
import re
from pathlib import Path
from typing import Iterator


from causal_assets.core.corpus.chunk import Chunk
from causal_assets.core.corpus.split import (CHUNK_CHARS, OVERLAP_CHARS, ChunkChars, OverlapChars, check_options,
                                            line_of, line_starts, split_with_overlap)
from causal_assets.core.foundation.errors import CorpusError

log = logging.getLogger(__name__)

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def package_root(package: str) -> Path:
    """The source directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise CorpusError(f"python_package: package {package!r} is not installed")
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    if spec.origin and spec.origin.endswith(".py"):
        return Path(spec.origin)
    raise CorpusError(f"python_package: package {package!r} has no Python source ({spec.origin})")


def module_name(root: Path, file: Path, package: str) -> str:
    rel = file.relative_to(root).with_suffix("")
    parts = [package, *rel.parts] if root.is_dir() else [package]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def signature(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    if isinstance(node, ast.ClassDef):
        bases = ", ".join(ast.unparse(b) for b in node.bases)
        return f"class {node.name}({bases})" if bases else f"class {node.name}"
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    return f"{prefix} {node.name}({ast.unparse(node.args)}){returns}"


SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def docstring_summary(docstring: str) -> str:
    """The first sentence of a docstring's first paragraph, whitespace-normalised."""
    first_para = docstring.strip().split("\n\n")[0]
    text = " ".join(first_para.split())
    return SENTENCE_END.split(text, maxsplit=1)[0] if text else ""


def mask_summary(text: str, summary: str) -> str:
    """Remove `summary` from `text` even where the docstring wraps it over several lines.

    This is the mined benchmark's leakage guard: a question made from a docstring summary must not be
    answerable by finding that sentence verbatim in the target chunk."""
    if not summary:
        return text
    pattern = r"\s+".join(re.escape(w) for w in summary.split())
    # the line breaks inside the sentence stay, with the indentation after them: the chunk's lines are still the
    # file's, and a docstring's closing quotes keep their place (a function dedented whole still parses)
    return re.sub(pattern, lambda m: "".join(re.findall(r"\s*\n\s*", m.group())), text, count=1)


def iter_python_files(root: Path, exclude_tests: bool = True) -> Iterator[Path]:
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    for f in files:
        rel_parts = f.relative_to(root.parent).parts
        if exclude_tests and any(p in ("tests", "test", "testing") or p.startswith("test_") for p in rel_parts):
            continue
        yield f


def _first_line(node: ast.stmt) -> int:
    """Where a definition's source starts: its first decorator, else its `def`/`class` line."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


def _unit_lines(lines: list[str], first: int, last: int, children: list[ast.stmt]) -> list[tuple[int, str]]:
    """(file line, text) of lines `first`..`last` (1-based), each of `children` (definitions with chunks of their own)
    replaced by a one-line stub: its signature, indented as it is, at its `def`/`class` line."""
    stubs = {_first_line(c): c for c in children}
    out, ln = [], first
    while ln <= last:
        child = stubs.get(ln)
        if child is None:
            out.append((ln, lines[ln - 1]))
            ln += 1
            continue
        head = lines[child.lineno - 1]
        out.append((child.lineno, f"{head[:len(head) - len(head.lstrip())]}{signature(child)}: ...\n"))
        ln = child.end_lineno + 1
    return out


def _parts(unit_lines: list[tuple[int, str]], summary: str, chunk_chars: int,
           overlap_chars: int) -> list[tuple[str, int, int, int, int]]:
    """(text, first file line, last file line, char_start, char_end) of each part of one unit, its summary masked
    first (so no part holds it) with the line breaks kept (so each part's lines are still the file's)."""
    text = mask_summary("".join(t for _, t in unit_lines), summary)
    if not text:
        return [("", unit_lines[0][0] if unit_lines else 1, unit_lines[-1][0] if unit_lines else 1, 0, 0)]
    starts = line_starts(text)
    out = []
    for s, e in split_with_overlap(text, chunk_chars, overlap_chars):
        first, last = line_of(starts, s) - 1, line_of(starts, max(s, e - 1)) - 1
        out.append((text[s:e], unit_lines[first][0], unit_lines[min(last, len(unit_lines) - 1)][0], s, e))
    return out


def join_parts(parts: list[tuple[int, str]]) -> str:
    """A unit's text rebuilt from its parts' (`char_start`, text), in part order: each overlap taken once."""
    out = ""
    for start, text in parts:
        out += text[max(0, len(out) - start):]
    return out


def chunk_python_source(source: str, module: str, path: str, corpus: str, mask_summaries: bool = False,
                        chunk_chars: int = CHUNK_CHARS, overlap_chars: int = OVERLAP_CHARS) -> list[Chunk]:
    """All chunks of one module's source text. Raises SyntaxError for unparsable source.

    With `mask_summaries`, each class/function chunk's text loses its docstring's first sentence (kept in
    `metadata.summary`), so questions mined from summaries cannot be matched verbatim."""
    tree = ast.parse(source, filename=path)
    # the parser's line breaks (\n, \r\n, \r), not str.splitlines' (which also breaks at \f, \v, \x1c ...)
    lines = [ln.rstrip("\r\n") + "\n" if ln.endswith(("\n", "\r")) else ln
             for ln in io.StringIO(source, newline="").readlines()]
    chunks: list[Chunk] = []

    def emit(unit_id: str, fqn: str, kind: str, unit_lines: list[tuple[int, str]], summary: str,
             metadata: dict) -> None:
        parts = _parts(unit_lines, summary, chunk_chars, overlap_chars)
        for k, (text, first, last, s, e) in enumerate(parts, 1):
            meta = metadata
            if len(parts) > 1:
                lean = {key: metadata[key] for key in ("fqn", "module", "parent") if key in metadata}
                meta = {**(metadata if k == 1 else {**lean, "part_of": unit_id}),
                        "part": k, "parts": len(parts), "char_start": s, "char_end": e}
            chunks.append(Chunk(
                chunk_id=unit_id if k == 1 else f"{unit_id}#part{k}", corpus=corpus, source="python_package",
                path=path, title=fqn, text=text, kind=kind, start_line=first, end_line=last, metadata=meta))

    imports = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    doc = ast.get_docstring(tree) or ""
    top = [n for n in tree.body if isinstance(n, DEFINITIONS)]
    emit(module, module, "module", _unit_lines(lines, 1, len(lines), top), "",
         {"fqn": module, "module": module, "docstring": doc[:2000], "imports": imports[:200]})
    seen: dict[str, int] = {}

    def visit(body: list[ast.stmt], prefix: str, parent_kind: str) -> None:
        for node in body:
            if not isinstance(node, DEFINITIONS):
                continue
            fqn = f"{prefix}.{node.name}"
            # Re-definitions (a property's getter and setter) share an FQN; keep both, distinctly.
            seen[fqn] = seen.get(fqn, 0) + 1
            chunk_id = fqn if seen[fqn] == 1 else f"{fqn}#{seen[fqn]}"
            kind = "class" if isinstance(node, ast.ClassDef) else ("method" if parent_kind == "class" else "function")
            docstring = ast.get_docstring(node) or ""
            summary = docstring_summary(docstring)
            # A class's own chunk is its source with its methods and nested classes cut to stubs (chunks of their
            # own); a function's is all of its source, nested functions included.
            children = [n for n in node.body if isinstance(n, DEFINITIONS)] if kind == "class" else []
            emit(chunk_id, fqn, kind, _unit_lines(lines, _first_line(node), node.end_lineno, children),
                 summary if mask_summaries else "",
                 {"fqn": fqn, "module": module, "signature": signature(node), "docstring": docstring[:2000],
                  "summary": summary, "parent": prefix})
            if isinstance(node, ast.ClassDef):
                visit(node.body, fqn, "class")

    visit(tree.body, module, "module")
    return chunks


def load_python_package(package: str, corpus: str, exclude_tests: bool = True,
                        subpackages: list[str] | None = None, mask_summaries: bool = False,
                        chunk_chars: ChunkChars = CHUNK_CHARS, overlap_chars: OverlapChars = OVERLAP_CHARS,
                        ) -> tuple[list[Chunk], dict[str, int]]:
    """Chunks of every module of `package` (optionally only `subpackages`, e.g. ["algorithms.shortest_paths"]).

    Returns (chunks, report) where report counts files parsed and files skipped (undecodable/unparsable). The options'
    annotations are what the corpus registry checks them against.
    """
    check_options(chunk_chars, overlap_chars)
    root = package_root(package)
    report = {"files": 0, "skipped_unparsable": 0, "skipped_undecodable": 0}
    chunks: list[Chunk] = []
    prefixes = [f"{package}.{s}" for s in subpackages or []]
    for f in iter_python_files(root, exclude_tests):
        module = module_name(root, f, package)
        if prefixes and not any(module == p or module.startswith(p + ".") for p in prefixes):
            continue
        try:
            source = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            report["skipped_undecodable"] += 1
            log.warning("skipping %s: not UTF-8", f)
            continue
        try:
            chunks.extend(chunk_python_source(source, module, str(f.relative_to(root.parent)), corpus, mask_summaries,
                                              chunk_chars, overlap_chars))
        except SyntaxError as e:
            report["skipped_unparsable"] += 1
            log.warning("skipping %s: %s", f, e)
            continue
        report["files"] += 1
    if not chunks:
        raise CorpusError(f"python_package: no Python source found for {package!r} under {root}"
                          + (f" (subpackages={subpackages})" if subpackages else ""))
    return chunks, report
