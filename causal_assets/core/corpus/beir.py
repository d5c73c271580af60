"""BEIR folders: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv` (header line, query-id corpus-id score)."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Iterator

from causal_assets.core.corpus.chunk import Chunk
from causal_assets.core.errors import CorpusError


def _jsonl(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    if not path.is_file():
        raise CorpusError(f"{path}: file not found")
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise CorpusError(f"{path}:{lineno}: malformed JSON ({e.msg})") from None
                if not isinstance(obj, dict):
                    raise CorpusError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
                for key in required:
                    if key not in obj:
                        raise CorpusError(f"{path}:{lineno}: missing field {key!r}")
                yield lineno, obj
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None


def load_beir_corpus(folder: str | Path, corpus: str) -> list[Chunk]:
    folder = Path(folder)
    path = folder / "corpus.jsonl"
    chunks, seen = [], set()
    for lineno, obj in _jsonl(path, ("_id", "text")):
        doc_id = str(obj["_id"])
        if doc_id in seen:
            raise CorpusError(f"{path}:{lineno}: duplicate _id {doc_id!r}")
        seen.add(doc_id)
        title, text = _text(path, lineno, obj, "title"), _text(path, lineno, obj, "text")
        if not (title.strip() or text.strip()):
            raise CorpusError(f"{path}:{lineno}: document {doc_id!r} has neither text nor title")
        chunks.append(Chunk(chunk_id=doc_id, corpus=corpus, source="beir", path=str(path), title=title,
                            text=text, kind="document",
                            metadata={k: v for k, v in obj.items() if k not in ("_id", "title", "text")}))
    if not chunks:
        raise CorpusError(f"{path}: corpus is empty")
    return chunks


def load_beir_queries(folder: str | Path) -> dict[str, str]:
    path = Path(folder) / "queries.jsonl"
    queries: dict[str, str] = {}
    for lineno, obj in _jsonl(path, ("_id", "text")):
        qid = str(obj["_id"])
        if qid in queries:
            raise CorpusError(f"{path}:{lineno}: duplicate query _id {qid!r}")
        queries[qid] = _text(path, lineno, obj, "text")
        if not queries[qid].strip():
            raise CorpusError(f"{path}:{lineno}: query {qid!r} has no text")
    return queries


def _text(path: Path, lineno: int, obj: dict, field: str) -> str:
    """A text field: a string (a number as written), or absent / null for none ("None" is not a text)."""
    value = obj.get(field)
    if value is None:
        return ""
    if isinstance(value, (dict, list, bool)):
        raise CorpusError(f"{path}:{lineno}: field {field!r} is a JSON {type(value).__name__}, not text")
    return str(value)


# Graded relevance in the benchmarks here is 0..2 (TREC uses up to 4); anything past this is a data error, and an
# infinite or NaN grade makes nDCG NaN.
MAX_QRELS_SCORE = 100.0


def beir_splits(folder: str | Path) -> list[str]:
    return sorted(p.stem for p in (Path(folder) / "qrels").glob("*.tsv"))


def load_beir_qrels(folder: str | Path, split: str, doc_ids: set[str] | None = None,
                    query_ids: set[str] | None = None) -> dict[str, dict[str, float]]:
    """qrels[query_id][doc_id] = score. Unknown ids (when the id sets are given) are an error naming the line."""
    path = Path(folder) / "qrels" / f"{split}.tsv"
    if not path.is_file():
        raise CorpusError(f"{path}: file not found (splits here: {beir_splits(folder)})")
    qrels: dict[str, dict[str, float]] = {}
    with path.open(encoding="utf-8", newline="") as fh:
        for lineno, row in enumerate(csv.reader(fh, delimiter="\t"), 1):
            if not row or (lineno == 1 and row[0] in ("query-id", "query_id", "qid")):
                continue
            if len(row) != 3:
                raise CorpusError(f"{path}:{lineno}: expected 3 tab-separated fields, got {len(row)}: {row!r}")
            qid, did, score = row
            try:
                value = float(score)
            except ValueError:
                raise CorpusError(f"{path}:{lineno}: score {score!r} is not a number") from None
            if not math.isfinite(value) or value < 0 or value > MAX_QRELS_SCORE:
                raise CorpusError(f"{path}:{lineno}: score {score!r} must be a finite number in "
                                  f"[0, {MAX_QRELS_SCORE:g}]")
            if doc_ids is not None and did not in doc_ids:
                raise CorpusError(f"{path}:{lineno}: corpus-id {did!r} is not in corpus.jsonl")
            if query_ids is not None and qid not in query_ids:
                raise CorpusError(f"{path}:{lineno}: query-id {qid!r} is not in queries.jsonl")
            judged = qrels.setdefault(qid, {})
            if did in judged:
                raise CorpusError(f"{path}:{lineno}: duplicate judgement for query-id {qid!r}, corpus-id {did!r}")
            judged[did] = value
    if not qrels:
        raise CorpusError(f"{path}: no judgements")
    return qrels
