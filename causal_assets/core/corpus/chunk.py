"""The one record every corpus source produces: a `Chunk`.

Every loader (Python package, BEIR, HotpotQA, folder) yields chunks with the same fields, so the index,
graph and labelling stages never need to know where a chunk came from.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import pandas as pd

CHUNK_COLUMNS = [
    "chunk_id", "corpus", "source", "path", "title", "text", "kind",
    "start_line", "end_line", "content_hash", "metadata",
]


def content_hash(text: str) -> str:
    """Stable hash of the text a chunk embeds; the key of the embedding cache."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class Chunk:
    chunk_id: str          # unique within a corpus (FQN for code, doc id for BEIR)
    corpus: str            # the corpus (partition) name
    source: str            # loader kind: python_package | beir | hotpotqa | folder
    path: str              # file path, FQN or dataset path it came from
    title: str
    text: str
    kind: str              # module | class | function | method | document | paragraph | file_chunk
    start_line: int = 0    # 1-based line span where it applies (0 when not meaningful)
    end_line: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def embed_text(self) -> str:
        """What sparse and dense indexes see: title then body (MTEB/BEIR convention)."""
        return f"{self.title}\n{self.text}" if self.title else self.text

    @property
    def content_hash(self) -> str:
        return content_hash(self.embed_text)


def chunks_to_frame(chunks: Iterable[Chunk]) -> pd.DataFrame:
    rows = []
    for c in chunks:
        row = asdict(c)
        # JSON keeps arbitrary metadata in one Parquet column that DuckDB can query with ->> operators.
        row["metadata"] = json.dumps(c.metadata, sort_keys=True, default=str)
        row["content_hash"] = c.content_hash
        rows.append(row)
    frame = pd.DataFrame(rows, columns=CHUNK_COLUMNS)
    return frame.astype({"start_line": "int64", "end_line": "int64"})


def frame_to_chunks(frame: pd.DataFrame) -> list[Chunk]:
    cols = [c for c in CHUNK_COLUMNS if c != "content_hash"]
    return [
        Chunk(**{**{c: row[c] for c in cols}, "metadata": json.loads(row["metadata"] or "{}")})
        for row in frame[cols].to_dict("records")
    ]
