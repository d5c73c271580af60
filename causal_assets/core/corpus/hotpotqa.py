"""HotpotQA-style JSON/JSONL: each question's context paragraphs become chunks, titles kept.

A paragraph is identified by (question id, position) so every question can rank its own paragraphs
(the distractor setting); `metadata.supporting` marks the gold paragraphs from `supporting_facts`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from causal_assets.core.corpus.chunk import Chunk
from causal_assets.core.errors import CorpusError


@dataclass(frozen=True)
class HotpotQuestion:
    question_id: str
    question: str
    answer: str
    type: str
    level: str
    supporting_titles: tuple[str, ...]
    paragraph_ids: tuple[str, ...]


def _records(path: Path) -> list[tuple[str, dict]]:
    if not path.is_file():
        raise CorpusError(f"{path}: file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None
        return [(f"{path}[{i}]", obj) for i, obj in enumerate(data)]
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append((f"{path}:{lineno}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise CorpusError(f"{path}:{lineno}: malformed JSON ({e.msg})") from None
    return out


def load_hotpotqa(path: str | Path, corpus: str) -> tuple[list[Chunk], list[HotpotQuestion]]:
    path = Path(path)
    chunks: list[Chunk] = []
    questions: list[HotpotQuestion] = []
    for where, obj in _records(path):
        if not isinstance(obj, dict):
            raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        for key in ("_id", "question", "context"):
            if key not in obj:
                raise CorpusError(f"{where}: missing field {key!r}")
        qid = str(obj["_id"])
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
        supporting = tuple(dict.fromkeys(str(t) for t, _ in facts))
        ids = []
        for pos, para in enumerate(obj["context"]):
            if not (isinstance(para, list) and len(para) == 2 and isinstance(para[1], list)):
                raise CorpusError(f"{where}: context[{pos}] must be [title, [sentences]], got {str(para)[:80]!r}")
            title, sentences = str(para[0]), [str(s) for s in para[1]]
            chunk_id = f"{qid}/{pos}"
            ids.append(chunk_id)
            chunks.append(Chunk(
                chunk_id=chunk_id, corpus=corpus, source="hotpotqa", path=str(path), title=title,
                text="".join(sentences), kind="paragraph",
                metadata={"question_id": qid, "position": pos, "supporting": title in supporting,
                          "n_sentences": len(sentences)},
            ))
        titles = {c.title for c in chunks[-len(ids):]}
        missing = [t for t in supporting if t not in titles]
        if missing:
            raise CorpusError(f"{where}: supporting_facts title {missing[0][:80]!r} is not a context paragraph")
        questions.append(HotpotQuestion(qid, str(obj["question"]), str(obj.get("answer", "")),
                                        str(obj.get("type", "")), str(obj.get("level", "")), supporting, tuple(ids)))
    if not chunks:
        raise CorpusError(f"{path}: no paragraphs")
    return chunks, questions
