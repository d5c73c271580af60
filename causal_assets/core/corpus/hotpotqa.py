"""HotpotQA-style JSON/JSONL: each question's context paragraphs become chunks, titles kept.

A paragraph is identified by (question id, position) so every question can rank its own paragraphs
(the distractor setting); `metadata.supporting` marks the gold paragraphs from `supporting_facts`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from causal_assets.core.corpus.chunk import Chunk
from causal_assets.core.corpus.fields import array_objects, id_field, parse_json, split_field, text_field, text_value
from causal_assets.core.foundation.errors import CorpusError


@dataclass(frozen=True)
class HotpotQuestion:
    query_id: str
    question: str
    answer: str
    type: str
    level: str
    supporting_titles: tuple[str, ...]
    paragraph_ids: tuple[str, ...]
    split: str | None = None   # the record's own `split`, if it has one (else the benchmark's hash halves)


def _records(path: Path) -> list[tuple[str, dict]]:
    if not path.is_file():
        raise CorpusError(f"{path}: file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    if text.lstrip().startswith("["):   # a whole-file JSON array: each element named by the line it starts on
        return list(array_objects(path, text))
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            out.append((f"{path}:{lineno}", parse_json(f"{path}:{lineno}", line)))
    return out


def load_hotpotqa(path: str | Path, corpus: str) -> tuple[list[Chunk], list[HotpotQuestion]]:
    path = Path(path)
    chunks: list[Chunk] = []
    questions: list[HotpotQuestion] = []
    seen: set[str] = set()
    for where, obj in _records(path):
        if not isinstance(obj, dict):
            raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        for key in ("_id", "question", "context"):
            if key not in obj:
                raise CorpusError(f"{where}: missing field {key!r}")
        qid = id_field(where, obj, "_id")
        if qid in seen:
            raise CorpusError(f"{where}: duplicate _id {qid!r}")
        seen.add(qid)
        question = text_field(where, obj, "question", required=True)
        if not isinstance(obj["context"], list) or not obj["context"]:
            raise CorpusError(f"{where}: context must be a non-empty list of [title, [sentences]] paragraphs")
        for pos, para in enumerate(obj["context"]):
            if not (isinstance(para, list) and len(para) == 2 and isinstance(para[1], list)):
                raise CorpusError(f"{where}: context[{pos}] must be [title, [sentences]], got {str(para)[:80]!r}")
        if "supporting_facts" not in obj:
            raise CorpusError(f"{where}: missing field 'supporting_facts'")
        facts = obj["supporting_facts"]
        if not isinstance(facts, list) or not facts:
            raise CorpusError(f"{where}: supporting_facts must be a non-empty list of [title, sentence index]")
        for i, fact in enumerate(facts):
            if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)
                    and isinstance(fact[1], int) and not isinstance(fact[1], bool)):
                raise CorpusError(f"{where}: supporting_facts[{i}] must be [title, sentence index], "
                                  f"got {str(fact)[:80]!r}")
        supporting = tuple(dict.fromkeys(text_value(where, f"supporting_facts[{i}]", t)
                                         for i, (t, _) in enumerate(facts)))
        ids = []
        for pos, para in enumerate(obj["context"]):
            if not (isinstance(para, list) and len(para) == 2 and isinstance(para[1], list)):
                raise CorpusError(f"{where}: context[{pos}] must be [title, [sentences]], got {str(para)[:80]!r}")
            title = text_value(where, f"context[{pos}] title", para[0])
            sentences = [text_value(where, f"context[{pos}] sentence {k}", s) for k, s in enumerate(para[1])]
            chunk_id = f"{qid}/{pos}"
            ids.append(chunk_id)
            chunks.append(Chunk(
                chunk_id=chunk_id, corpus=corpus, source="hotpotqa", path=str(path), title=title,
                text="".join(sentences), kind="paragraph",
                metadata={"query_id": qid, "position": pos, "supporting": title in supporting,
                          "n_sentences": len(sentences)},
            ))
        titles = {c.title for c in chunks[-len(ids):]}
        missing = [t for t in supporting if t not in titles]
        if missing:
            raise CorpusError(f"{where}: supporting_facts title {missing[0][:80]!r} is not a context paragraph")
        questions.append(HotpotQuestion(qid, question, text_field(where, obj, "answer"), text_field(where, obj, "type"),
                                        text_field(where, obj, "level"), supporting, tuple(ids),
                                        split_field(where, obj)))
    if not chunks:
        raise CorpusError(f"{path}: no paragraphs")
    return chunks, questions
