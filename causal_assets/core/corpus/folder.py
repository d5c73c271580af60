"""A folder of text, Markdown and code files, chunked with overlap.

Python files go through the AST chunker (one chunk per function/class); other files are cut into windows of
about `chunk_chars` characters with `overlap_chars` of overlap, preferring paragraph and line boundaries.
Binary, non-UTF-8, oversize files and symlinks leaving the root are skipped and counted in the report:
one bad file should not stop a corpus of thousands.
"""
from __future__ import annotations

import logging
from pathlib import Path

from causal_assets.core.corpus.chunk import Chunk
from causal_assets.core.corpus.python_package import chunk_python_source
from causal_assets.core.errors import CorpusError

log = logging.getLogger(__name__)

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".py", ".js", ".ts", ".tsx", ".java", ".go", ".rs", ".c",
                 ".h", ".cpp", ".hpp", ".cs", ".rb", ".php", ".sh", ".sql", ".yaml", ".yml", ".toml", ".json",
                 ".html", ".css", ".ini", ".cfg"}


def split_with_overlap(text: str, chunk_chars: int, overlap_chars: int) -> list[tuple[int, int]]:
    """Character spans [start, end) covering `text`, each ~chunk_chars long, consecutive ones overlapping."""
    if overlap_chars >= chunk_chars:
        raise ValueError(f"overlap_chars ({overlap_chars}) must be smaller than chunk_chars ({chunk_chars})")
    spans, start, n = [], 0, len(text)
    while start < n:
        end = min(n, start + chunk_chars)
        if end < n:
            # Cut at the last paragraph break, else line break, in the second half of the window.
            for sep in ("\n\n", "\n", ". "):
                cut = text.rfind(sep, start + chunk_chars // 2, end)
                if cut != -1:
                    end = cut + len(sep)
                    break
        spans.append((start, end))
        if end >= n:
            break
        start = max(end - overlap_chars, start + 1)
    return spans


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


def load_folder(root: str | Path, corpus: str, chunk_chars: int = 1500, overlap_chars: int = 200,
                max_file_bytes: int = 2_000_000, suffixes: set[str] | None = None) -> tuple[list[Chunk], dict]:
    root = Path(root)
    if not root.is_dir():
        raise CorpusError(f"{root}: folder not found")
    real_root = root.resolve()
    suffixes = suffixes or TEXT_SUFFIXES
    report = {"files": 0, "skipped_binary": 0, "skipped_undecodable": 0, "skipped_oversize": 0,
              "skipped_outside_root": 0, "skipped_unparsable": 0, "skipped": []}
    chunks: list[Chunk] = []

    def skip(kind: str, f: Path, why: str) -> None:
        report[kind] += 1
        report["skipped"].append(f"{f.relative_to(root)}: {why}")
        log.warning("skipping %s: %s", f, why)

    for f in sorted(root.rglob("*")):
        if any(part.startswith(".") for part in f.relative_to(root).parts) or f.suffix.lower() not in suffixes:
            continue
        if not f.resolve().is_relative_to(real_root):
            skip("skipped_outside_root", f, f"resolves outside the corpus root ({f.resolve()})")
            continue
        if not f.is_file():
            continue
        size = f.stat().st_size
        if size > max_file_bytes:
            skip("skipped_oversize", f, f"{size} bytes > max_file_bytes={max_file_bytes}")
            continue
        data = f.read_bytes()
        if _is_binary(data[:8192]):
            skip("skipped_binary", f, "binary content (NUL bytes)")
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            skip("skipped_undecodable", f, f"not UTF-8 ({e.reason} at byte {e.start})")
            continue
        rel = str(f.relative_to(root))
        if not text.strip():
            continue
        if f.suffix == ".py":
            module = ".".join(f.relative_to(root).with_suffix("").parts)
            try:
                chunks.extend(chunk_python_source(text, module, rel, corpus))
                report["files"] += 1
                continue
            except SyntaxError as e:
                skip("skipped_unparsable", f, f"Python syntax error line {e.lineno}; chunked as text")
        starts = _line_starts(text)
        for i, (s, e) in enumerate(split_with_overlap(text, chunk_chars, overlap_chars)):
            chunks.append(Chunk(
                chunk_id=f"{rel}#{i}", corpus=corpus, source="folder", path=rel, title=f.name, text=text[s:e],
                kind="file_chunk", start_line=_line_of(starts, s), end_line=_line_of(starts, max(s, e - 1)),
                metadata={"suffix": f.suffix.lower(), "char_start": s, "char_end": e},
            ))
        report["files"] += 1
    if not chunks:
        raise CorpusError(f"{root}: no readable text files (suffixes {sorted(suffixes)}); skipped: {report['skipped'][:5]}")
    return chunks, report


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
    return starts


def _line_of(starts: list[int], offset: int) -> int:
    import bisect
    return bisect.bisect_right(starts, offset)
