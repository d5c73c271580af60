"""Which chunk table an index part was built from, so that a part built from other chunks is never served as current.

`corpus_chunks` carries the fingerprint of its own content (`chunks_fingerprint`), and every part built from it
(postings, vocabulary, embeddings, graph, entity vectors) copies it into a column of the same name. A part recording
another fingerprint, or none, was built from other chunks (`corpus_chunks` re-materialized alone, a failed
re-index, a file added to a folder corpus): loading refuses it (`StaleIndexError`, naming the parts and the command
that rebuilds them) and `needs.missing` counts it as missing, so `build`, `search` and `ask` rebuild it. An empty
part records and claims nothing. See docs/security.md ("Index integrity").
"""
from __future__ import annotations

import hashlib

import pandas as pd
from upath import UPath

from causal_assets.core.foundation.errors import CorpusError
from causal_assets.core.foundation.storage import asset_path, parquet_column_values, read_parquet

FINGERPRINT = "chunks_fingerprint"
# What the parts read from a chunk: its id and position, its text and title (through `content_hash`), its kind,
# source location and metadata (the graph builders), and the tokenizer's options (`index_options`).
FIELDS = ("chunk_id", "content_hash", "kind", "path", "start_line", "end_line", "metadata", "index_options")


class StaleIndexError(CorpusError):
    """An index part was built from another version of the corpus's chunks."""


def compute_fingerprint(chunks: pd.DataFrame) -> str:
    """The fingerprint of a chunk table's content (16 hex digits), whatever column it already records."""
    if "chunk_idx" in chunks:
        chunks = chunks.sort_values("chunk_idx", kind="stable")
    h = hashlib.sha256(f"{len(chunks)}\x1e".encode())
    for column in FIELDS:
        if column in chunks:
            h.update(column.encode() + b"\x1d")
            h.update("\x1f".join(map(str, chunks[column].tolist())).encode("utf-8", "surrogatepass"))
            h.update(b"\x1e")
    return h.hexdigest()[:16]


def chunks_fingerprint(chunks: pd.DataFrame) -> str:
    """The fingerprint a chunk table records, or (a table written before fingerprints existed, or a frame made
    in memory) the one computed from its content."""
    recorded = recorded_fingerprint(chunks.get(FINGERPRINT))
    return recorded if recorded else compute_fingerprint(chunks)


def recorded_fingerprint(column: pd.Series | set | None) -> str | None:
    """The one fingerprint a part's column (or the set of its values) holds; "" for an empty part; None when the
    part has no such column (or holds several: a mix of builds, which is no build)."""
    if column is None:
        return None
    values = set(map(str, column)) if isinstance(column, set) else set(column.astype(str).unique())
    if not values:
        return ""
    return values.pop() if len(values) == 1 else None


def stale(expected: str, parts: dict[str, pd.Series | set | None]) -> dict[str, str | None]:
    """{part: the fingerprint it records (None: none)} for each part of `parts` (name -> its fingerprint column,
    None when it has none) not built from the chunks of fingerprint `expected`."""
    out = {}
    for name, column in parts.items():
        recorded = recorded_fingerprint(column)
        if recorded != "" and recorded != expected:
            out[name] = recorded
    return out


def require_current(corpus: str, expected: str, parts: dict[str, pd.Series | None]) -> None:
    """Refuse parts of corpus `corpus` not built from the chunks of fingerprint `expected`."""
    old = stale(expected, parts)
    if old:
        raise StaleIndexError(stale_message(corpus, expected, old))


def stale_message(corpus: str, expected: str, old: dict[str, str | None]) -> str:
    recorded = sorted({f"chunks {v}" if v else "no chunk fingerprint" for v in old.values()})
    one = len(old) == 1
    return (f"corpus {corpus!r}: {', '.join(old)} {'was' if one else 'were'} built from another version of "
            f"corpus_chunks (recorded: {', '.join(recorded)}; corpus_chunks is now {expected}), so "
            f"{'it' if one else 'they'} would serve old results for the new chunks; rebuild "
            f"{'it' if one else 'them'} with `causal-assets build {corpus}` (or materialize "
            f"{'it' if one else 'them'} for partition {corpus})")


def stored_fingerprints(base: str | UPath, corpus: str, assets: list[str]) -> dict[str, set | None]:
    """The fingerprints each existing asset records (None when it has no such column), read from its Parquet's
    statistics, or its one column, without loading the table."""
    out = {}
    for asset in assets:
        path = asset_path(base, asset, corpus)
        if path.exists():
            out[asset] = parquet_column_values(path, FINGERPRINT)
    return out


def stored_chunks_fingerprint(base: str | UPath, corpus: str) -> str | None:
    """The fingerprint of the materialized `corpus_chunks` of `corpus` (None when it is not materialized)."""
    path = asset_path(base, "corpus_chunks", corpus)
    if not path.exists():
        return None
    recorded = recorded_fingerprint(parquet_column_values(path, FINGERPRINT))
    if recorded:
        return recorded
    return compute_fingerprint(read_parquet(path))

