"""BEIR folders: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv` (header line, query-id corpus-id score)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

from causal_assets.core.corpus.chunk import Chunk
from causal_assets.core.corpus.fields import id_field, parse_json, text_field, text_value
from causal_assets.core.foundation.errors import CorpusError


def _jsonl(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    if not path.is_file():
        raise CorpusError(f"{path}: file not found")
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                obj = parse_json(f"{path}:{lineno}", line)
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
        where = f"{path}:{lineno}"
        chunk_id = id_field(where, obj, "_id")
        if chunk_id in seen:
            raise CorpusError(f"{path}:{lineno}: duplicate _id {chunk_id!r}")
        seen.add(chunk_id)
        title, text = text_field(where, obj, "title"), text_field(where, obj, "text")
        if not (title.strip() or text.strip()):
            raise CorpusError(f"{path}:{lineno}: document {chunk_id!r} has neither text nor title")
        chunks.append(Chunk(chunk_id=chunk_id, corpus=corpus, source="beir", path=str(path), title=title,
                            text=text, kind="document",
                            metadata={k: v for k, v in obj.items() if k not in ("_id", "title", "text")}))
    if not chunks:
        raise CorpusError(f"{path}: corpus is empty")
    return chunks


def load_beir_queries(folder: str | Path) -> dict[str, str]:
    path = Path(folder) / "queries.jsonl"
    queries: dict[str, str] = {}
    for lineno, obj in _jsonl(path, ("_id", "text")):
        where = f"{path}:{lineno}"
        qid = id_field(where, obj, "_id")
        if qid in queries:
            raise CorpusError(f"{where}: duplicate query _id {qid!r}")
        queries[qid] = text_field(where, obj, "text")
        if not queries[qid].strip():
            raise CorpusError(f"{where}: query {qid!r} has no text")
    return queries


def load_beir_answers(folder: str | Path) -> dict[str, tuple[str, ...]]:
    """Accepted answers of the queries that carry them: `metadata.answer` or `metadata.answers` of queries.jsonl (a
    text or a list of texts; the first is the answer, the others its aliases). What Monte Carlo labels of a BEIR
    benchmark score; queries without one get no labels."""
    path = Path(folder) / "queries.jsonl"
    answers: dict[str, tuple[str, ...]] = {}
    for lineno, obj in _jsonl(path, ("_id",)):
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            continue
        where = f"{path}:{lineno}"
        found: list[str] = []
        for key in ("answer", "answers"):
            value = meta.get(key)
            for i, item in enumerate(value if isinstance(value, list) else [value] if value is not None else []):
                text = text_value(where, f"metadata.{key}" + (f"[{i}]" if isinstance(value, list) else ""), item)
                if text.strip():
                    found.append(text.strip())
        if found:
            answers[id_field(where, obj, "_id")] = tuple(dict.fromkeys(found))
    return answers


def beir_chunk_ids(folder: str | Path) -> set[str]:
    """The document ids of the folder's corpus.jsonl (read as `load_beir_corpus` reads them)."""
    path = Path(folder) / "corpus.jsonl"
    return {id_field(f"{path}:{lineno}", obj, "_id") for lineno, obj in _jsonl(path, ("_id",))}


# Graded relevance in the benchmarks here is 0..2 (TREC uses up to 4); anything past this is a data error, and an
# infinite or NaN grade makes nDCG NaN.
MAX_QRELS_SCORE = 100.0


def beir_splits(folder: str | Path) -> list[str]:
    return sorted(p.stem for p in (Path(folder) / "qrels").glob("*.tsv"))


def load_beir_qrels(folder: str | Path, split: str, chunk_ids: set[str] | None = None,
                    query_ids: set[str] | None = None) -> dict[str, dict[str, float]]:
    """qrels[query_id][chunk_id] = score. Unknown ids (when the id sets are given) are an error naming the line."""
    path = Path(folder) / "qrels" / f"{split}.tsv"
    if not path.is_file():
        raise CorpusError(f"{path}: file not found (splits here: {beir_splits(folder)})")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    qrels: dict[str, dict[str, float]] = {}
    # Plain tab-separated lines, not the csv module: its quoting read a corpus-id starting with '"' as a quoted
    # field that swallowed the tab, the newline and the next judgement.
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        row = line.split("\t")
        if not line or (lineno == 1 and row[0] in ("query-id", "query_id", "qid")):
            continue
        if len(row) != 3:
            raise CorpusError(f"{path}:{lineno}: expected 3 tab-separated fields, got {len(row)}: "
                              f"{str(row)[:200]}")
        qid, did, score = row
        try:
            value = float(score)
        except ValueError:
            raise CorpusError(f"{path}:{lineno}: score {score!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or value > MAX_QRELS_SCORE:
            raise CorpusError(f"{path}:{lineno}: score {score!r} must be a finite number in "
                              f"[0, {MAX_QRELS_SCORE:g}]")
        if chunk_ids is not None and did not in chunk_ids:
            raise CorpusError(f"{path}:{lineno}: corpus-id {did!r} is not a document of the corpus")
        if query_ids is not None and qid not in query_ids:
            raise CorpusError(f"{path}:{lineno}: query-id {qid!r} is not in queries.jsonl")
        judged = qrels.setdefault(qid, {})
        if did in judged:
            raise CorpusError(f"{path}:{lineno}: duplicate judgement for query-id {qid!r}, corpus-id {did!r}")
        judged[did] = value
    if not qrels:
        raise CorpusError(f"{path}: no judgements")
    return qrels
