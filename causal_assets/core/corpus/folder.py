"""A folder of text, Markdown and code files, chunked with overlap.

Python files go through the AST chunker (a chunk per module, class and function, long ones in parts); other files
are cut into windows of about `chunk_chars` characters with `overlap_chars` of overlap, preferring paragraph and line
boundaries (the same splitter and options cut the Python chunks' long parts).
Binary, non-UTF-8, oversize, empty and blank files, FIFOs, sockets and devices, symlinks leaving the root, hard
links, file names that are not UTF-8, directories nested deeper than `MAX_DEPTH`, and Python files too deep for the
parser or whose names another file already gave (both chunked as text) are skipped and counted in the report: one bad file should not stop a corpus
of thousands. The walk is iterative (no recursion), does not follow directory symlinks and never opens anything but
regular files.
"""
from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Annotated, Iterator

from pydantic import Field

from causal_assets.core.corpus.chunk import Chunk
from causal_assets.core.corpus.python_package import chunk_python_source
from causal_assets.core.corpus.split import (CHUNK_CHARS, OVERLAP_CHARS, ChunkChars, OverlapChars, check_options,
                                            line_of, line_starts, split_with_overlap)
from causal_assets.core.foundation.errors import CorpusError
from causal_assets.core.foundation.limits import MAX_FILE_BYTES
from causal_assets.core.foundation.paths import display_path

log = logging.getLogger(__name__)

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".py", ".js", ".ts", ".tsx", ".java", ".go", ".rs", ".c",
                 ".h", ".cpp", ".hpp", ".cs", ".rb", ".php", ".sh", ".sql", ".yaml", ".yml", ".toml", ".json",
                 ".html", ".css", ".ini", ".cfg"}


# Deeper directories are skipped (and listed): real corpora are a few dozen levels deep at most.
MAX_DEPTH = 64


def walk_files(root: str | Path, max_depth: int = MAX_DEPTH,
               on_skip=None) -> Iterator[Path]:
    """Every non-directory entry under `root`, sorted, without recursion and without following directory symlinks.
    Hidden entries (leading dot) are left out. `on_skip(path, why)` is told about directories deeper than
    `max_depth` and directories that cannot be listed."""
    root = Path(root)
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: os.fsencode(e.name))
        except OSError as e:
            if on_skip:
                on_skip(folder, f"cannot list directory ({e.strerror or e})")
            continue
        subdirs = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                if depth + 1 > max_depth:
                    if on_skip:
                        on_skip(Path(entry.path), f"directory deeper than {max_depth} levels")
                    continue
                subdirs.append(Path(entry.path))
            else:
                yield Path(entry.path)
        stack.extend((d, depth + 1) for d in reversed(subdirs))


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "a special file"


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


FileBytes = Annotated[int, Field(gt=0, le=MAX_FILE_BYTES)]


def load_folder(root: str | Path, corpus: str, chunk_chars: ChunkChars = CHUNK_CHARS,
                overlap_chars: OverlapChars = OVERLAP_CHARS, max_file_bytes: FileBytes = 2_000_000,
                suffixes: set[str] | None = None) -> tuple[list[Chunk], dict]:
    """Chunks of every text file under `root` and a load report. The options' annotations are what the corpus
    registry checks them against when it loads (types exactly, and these ranges)."""
    root = Path(root)
    check_options(chunk_chars, overlap_chars)
    if not root.is_dir():
        try:
            mode = os.stat(root).st_mode
        except OSError:
            raise CorpusError(f"{root}: folder not found") from None
        what = "a file" if stat.S_ISREG(mode) else file_kind(mode)
        raise CorpusError(f"{root}: is {what}, not a folder (loader 'folder' reads every text file under a "
                          "folder; give the folder that holds it)")
    real_root = root.resolve()
    suffixes = suffixes or TEXT_SUFFIXES
    report = {"files": 0, "skipped_binary": 0, "skipped_undecodable": 0, "skipped_oversize": 0,
              "skipped_outside_root": 0, "skipped_unparsable": 0, "skipped_bad_name": 0, "skipped_hardlink": 0,
              "skipped_too_deep": 0, "skipped_unreadable": 0, "skipped_name_clash": 0, "skipped_not_regular": 0,
              "skipped_blank": 0, "skipped": []}
    chunks: list[Chunk] = []
    owner: dict[str, str] = {}   # a chunk's id -> the file it was cut from

    def skip(kind: str, f: Path, why: str) -> None:
        report[kind] += 1
        try:
            rel = f.relative_to(root)
        except ValueError:
            rel = f
        report["skipped"].append(f"{display_path(rel)}: {why}")
        log.warning("skipping %s: %s", display_path(f), why)

    def skip_dir(d: Path, why: str) -> None:
        skip("skipped_too_deep" if "deeper" in why else "skipped_unreadable", d, why)

    for f in sorted(walk_files(root, on_skip=skip_dir)):  # the same order as the sorted rglob before
        if f.suffix.lower() not in suffixes:
            continue
        rel = str(f.relative_to(root))
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            skip("skipped_bad_name", f, "file name is not valid UTF-8")
            continue
        try:
            resolved = f.resolve()
            if not resolved.is_relative_to(real_root):
                skip("skipped_outside_root", f, f"resolves outside the corpus root ({display_path(resolved)})")
                continue
            st = os.stat(f)
            if not stat.S_ISREG(st.st_mode):   # a FIFO would block the read, a device never end
                skip("skipped_not_regular", f, f"not a regular file ({file_kind(st.st_mode)})")
                continue
            if st.st_nlink > 1:
                skip("skipped_hardlink", f, f"has {st.st_nlink} hard links (may be a file outside the root)")
                continue
            if st.st_size > max_file_bytes:
                skip("skipped_oversize", f, f"{st.st_size} bytes > max_file_bytes={max_file_bytes}")
                continue
            with open(f, "rb", opener=lambda p, fl: os.open(p, fl | os.O_NONBLOCK)) as fh:
                data = fh.read(max_file_bytes + 1)
        except (OSError, RuntimeError) as e:  # RuntimeError: symlink loop on some Pythons
            skip("skipped_unreadable", f, f"cannot read ({type(e).__name__}: {e})")
            continue
        if len(data) > max_file_bytes:
            skip("skipped_oversize", f, f"grew past max_file_bytes={max_file_bytes} while being read")
            continue
        if _is_binary(data[:8192]):
            skip("skipped_binary", f, "binary content (NUL bytes)")
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            skip("skipped_undecodable", f, f"not UTF-8 ({e.reason} at byte {e.start})")
            continue
        if not text.strip():
            skip("skipped_blank", f, "empty or only whitespace" if text else "empty file")
            continue
        if f.suffix == ".py":
            module = ".".join(f.relative_to(root).with_suffix("").parts)
            try:
                code_chunks = chunk_python_source(text, module, rel, corpus, chunk_chars=chunk_chars,
                                                  overlap_chars=overlap_chars)
                # pkg/mod.py and pkg.mod.py give the same names: the second file's would repeat the first's ids
                taken = next((c.chunk_id for c in code_chunks if c.chunk_id in owner), None)
                if taken is None:
                    chunks.extend(code_chunks)
                    owner.update((c.chunk_id, rel) for c in code_chunks)
                    report["files"] += 1
                    continue
                skip("skipped_name_clash", f, f"{taken!r} is already a chunk of {owner[taken]}; chunked as text")
            except SyntaxError as e:
                skip("skipped_unparsable", f, f"Python syntax error line {e.lineno}; chunked as text")
            except (RecursionError, MemoryError, ValueError) as e:
                skip("skipped_unparsable", f, f"Python source too deeply nested to parse ({type(e).__name__}); "
                                              "chunked as text")
        starts = line_starts(text)
        text_chunks = [Chunk(chunk_id=f"{rel}#{i}", corpus=corpus, source="folder", path=rel, title=f.name,
                             text=text[s:e], kind="file_chunk", start_line=line_of(starts, s),
                             end_line=line_of(starts, max(s, e - 1)),
                             metadata={"suffix": f.suffix.lower(), "char_start": s, "char_end": e})
                       for i, (s, e) in enumerate(split_with_overlap(text, chunk_chars, overlap_chars))]
        # a window's id `<file>#<i>` can be a code chunk's name (a module `a.md#0`, from `a.md#0.py`)
        taken = next((c.chunk_id for c in text_chunks if c.chunk_id in owner), None)
        if taken is not None:
            skip("skipped_name_clash", f, f"{taken!r} is already a chunk of {owner[taken]}; not indexed")
            continue
        chunks.extend(text_chunks)
        owner.update((c.chunk_id, rel) for c in text_chunks)
        report["files"] += 1
    if not chunks:
        raise CorpusError(f"{root}: no readable text files (suffixes {sorted(suffixes)}); skipped: {report['skipped'][:5]}")
    return chunks, report

