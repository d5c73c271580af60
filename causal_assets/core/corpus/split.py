"""Cutting long text into overlapping windows: what the folder loader does to its text files and the Python loader to
its long modules, classes and functions, with the same `chunk_chars` / `overlap_chars` options."""
from __future__ import annotations

import bisect
from typing import Annotated

from pydantic import Field

from causal_assets.core.foundation.limits import MAX_CHUNK_CHARS

CHUNK_CHARS = 1500     # the default window: about 400 tokens of prose, 300-500 of code
OVERLAP_CHARS = 200
# The options' types, as the corpus registry checks them (bounded: `foundation.limits`)
ChunkChars = Annotated[int, Field(gt=0, le=MAX_CHUNK_CHARS)]
OverlapChars = Annotated[int, Field(ge=0, le=MAX_CHUNK_CHARS)]


def split_with_overlap(text: str, chunk_chars: int, overlap_chars: int) -> list[tuple[int, int]]:
    """Character spans [start, end) covering `text`, each ~chunk_chars long, consecutive ones overlapping by at most
    `overlap_chars`; a span ends at a paragraph, line or sentence break and starts at a line or word boundary where
    the window has one."""
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
        overlap = end - overlap_chars
        # the overlap starts at a line, else a word boundary: a chunk that began mid-word ("xist` |...") read badly
        for sep in ("\n", " "):
            cut = text.find(sep, overlap, end - 1)
            if cut != -1:
                overlap = cut + 1
                break
        start = max(overlap, start + 1)
    return spans


def check_options(chunk_chars: int = CHUNK_CHARS, overlap_chars: int = OVERLAP_CHARS, **_) -> None:
    """What the option types cannot say: the overlap must be shorter than a chunk (else no window advances)."""
    if overlap_chars >= chunk_chars:
        raise ValueError(f"option 'overlap_chars' ({overlap_chars}) must be smaller than 'chunk_chars' "
                         f"({chunk_chars})")


def line_starts(text: str) -> list[int]:
    """The offset of every line's first character (lines end at "\\n")."""
    starts = [0]
    starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
    return starts


def line_of(starts: list[int], offset: int) -> int:
    """The 1-based line of character `offset`, given `line_starts`."""
    return bisect.bisect_right(starts, offset)
