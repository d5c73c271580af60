"""Chunks from an installed Python package's source tree, parsed with `ast` (never imported or executed).

One chunk per module, class, function and method, each with its fully qualified name (FQN), signature,
docstring and exact source span. The module chunk carries the docstring and the import block: that is
what a reader needs to know what a module is for and what it depends on, without duplicating its bodies.
"""
from __future__ import annotations

import ast
import importlib.util
import logging
import re
from pathlib import Path
from typing import Iterator

from causal_assets.core.corpus.chunk import Chunk
from causal_assets.core.foundation.errors import CorpusError

log = logging.getLogger(__name__)

MAX_CHUNK_CHARS = 8_000  # very long functions are cut: embedders see 256 tokens, BM25 gains little past this


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
    return re.sub(pattern, "", text, count=1)


def _segment(lines: list[str], node: ast.AST) -> str:
    start = node.lineno - 1
    if getattr(node, "decorator_list", None):
        start = min(d.lineno for d in node.decorator_list) - 1
    return "".join(lines[start:node.end_lineno])[:MAX_CHUNK_CHARS]


def iter_python_files(root: Path, exclude_tests: bool = True) -> Iterator[Path]:
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    for f in files:
        rel_parts = f.relative_to(root.parent).parts
        if exclude_tests and any(p in ("tests", "test", "testing") or p.startswith("test_") for p in rel_parts):
            continue
        yield f


def chunk_python_source(source: str, module: str, path: str, corpus: str,
                        mask_summaries: bool = False) -> list[Chunk]:
    """All chunks of one module's source text. Raises SyntaxError for unparsable source.

    With `mask_summaries`, each class/function chunk's text loses its docstring's first sentence (kept in
    `metadata.summary`), so questions mined from summaries cannot be matched verbatim."""
    tree = ast.parse(source, filename=path)
    lines = source.splitlines(keepends=True)
    imports = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    doc = ast.get_docstring(tree) or ""
    names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    module_text = "\n".join(filter(None, [doc, "\n".join(imports), "defines: " + ", ".join(names) if names else ""]))
    chunks = [Chunk(
        chunk_id=module, corpus=corpus, source="python_package", path=path, title=module,
        text=module_text[:MAX_CHUNK_CHARS], kind="module", start_line=1, end_line=max(1, len(lines)),
        metadata={"fqn": module, "module": module, "docstring": doc[:2000], "imports": imports[:200]},
    )]
    seen: dict[str, int] = {}

    def visit(body: list[ast.stmt], prefix: str, parent_kind: str) -> None:
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            fqn = f"{prefix}.{node.name}"
            # Conditional re-definitions (e.g. `if sys.version...: def f`) share an FQN; keep both, distinctly.
            seen[fqn] = seen.get(fqn, 0) + 1
            chunk_id = fqn if seen[fqn] == 1 else f"{fqn}#{seen[fqn]}"
            kind = "class" if isinstance(node, ast.ClassDef) else ("method" if parent_kind == "class" else "function")
            sig = signature(node)
            docstring = ast.get_docstring(node) or ""
            summary = docstring_summary(docstring)
            if kind == "class":
                # A class chunk is its header, docstring and method signatures; the methods are chunks of their own.
                methods = [signature(m) for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
                text = "\n".join(filter(None, [sig + ":", docstring, *methods]))[:MAX_CHUNK_CHARS]
            else:
                text = _segment(lines, node)
            if mask_summaries:
                text = mask_summary(text, summary)
            chunks.append(Chunk(
                chunk_id=chunk_id, corpus=corpus, source="python_package", path=path, title=fqn, text=text,
                kind=kind, start_line=node.lineno, end_line=node.end_lineno or node.lineno,
                metadata={"fqn": fqn, "module": module, "signature": sig, "docstring": docstring[:2000],
                          "summary": summary, "parent": prefix},
            ))
            if isinstance(node, ast.ClassDef):
                visit(node.body, fqn, "class")

    visit(tree.body, module, "module")
    return chunks


def load_python_package(package: str, corpus: str, exclude_tests: bool = True,
                        subpackages: list[str] | None = None,
                        mask_summaries: bool = False) -> tuple[list[Chunk], dict[str, int]]:
    """Chunks of every module of `package` (optionally only `subpackages`, e.g. ["algorithms.shortest_paths"]).

    Returns (chunks, report) where report counts files parsed and files skipped (undecodable/unparsable).
    """
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
            chunks.extend(chunk_python_source(source, module, str(f.relative_to(root.parent)), corpus, mask_summaries))
        except SyntaxError as e:
            report["skipped_unparsable"] += 1
            log.warning("skipping %s: %s", f, e)
            continue
        report["files"] += 1
    if not chunks:
        raise CorpusError(f"python_package: no Python source found for {package!r} under {root}"
                          + (f" (subpackages={subpackages})" if subpackages else ""))
    return chunks, report
