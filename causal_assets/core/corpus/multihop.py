"""Multi-hop QA records (HotpotQA, 2WikiMultihopQA, MuSiQue) as questions with their own paragraphs.

One reader for the three formats, detected per record:

* HotpotQA / 2Wiki: ``_id``, ``question``, ``answer``, ``supporting_facts`` [[title, sentence index]], ``context``
  [[title, [sentences]]]. Gold paragraphs are those whose title is in ``supporting_facts``. HotpotQA sentences
  carry their own leading space, 2Wiki's do not ("screenwriter.He"): sentences are joined with a space exactly
  where none is there already.
* MuSiQue: ``id``, ``question``, ``answer``, ``answer_aliases``, ``paragraphs`` [{``idx``, ``title``,
  ``paragraph_text``, ``is_supporting``}]. Titles repeat within a question, so gold is ``is_supporting``, never
  the title, and a paragraph's id is its index.

Records without paragraphs (some 2Wiki dev records have no ``context``) are skipped and counted; ``strict=True``
refuses the file instead. Any other malformed record stops with one error naming file, line and field.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from causal_assets.core.corpus.chunk import Chunk
from causal_assets.core.corpus.fields import id_field, split_field, text_field, text_value
from causal_assets.core.corpus.hotpotqa import _records
from causal_assets.core.foundation.errors import CorpusError


class CorpusWarning(UserWarning):
    """Data a loader left out without failing (e.g. multi-hop records without paragraphs)."""


@dataclass(frozen=True)
class Paragraph:
    title: str
    text: str
    supporting: bool


@dataclass(frozen=True)
class MultiHopQuestion:
    query_id: str
    question: str
    answer: str
    aliases: tuple[str, ...]
    type: str
    paragraphs: tuple[Paragraph, ...]
    split: str | None = None   # the record's own `split`, if it has one (else the benchmark's hash halves)

    @property
    def gold(self) -> list[int]:
        return [i for i, p in enumerate(self.paragraphs) if p.supporting]


@dataclass
class MultiHopFile:
    questions: list[MultiHopQuestion]
    skipped_without_paragraphs: list[str] = field(default_factory=list)
    format_counts: dict[str, int] = field(default_factory=dict)


def join_sentences(sentences: list[str]) -> str:
    out = ""
    for s in sentences:
        if out and not out[-1].isspace() and s and not s[0].isspace():
            out += " "
        out += s
    return out


def _require(obj: dict, where: str, *keys: str) -> None:
    for key in keys:
        if key not in obj:
            raise CorpusError(f"{where}: missing field {key!r}")


def _musique(obj: dict, where: str) -> MultiHopQuestion | None:
    _require(obj, where, "id", "question", "answer")
    paras = obj.get("paragraphs") or []
    if not paras:
        return None
    if not isinstance(paras, list):
        raise CorpusError(f"{where}: 'paragraphs' must be a list of paragraphs")
    out = []
    for i, p in enumerate(paras):
        if not isinstance(p, dict) or "paragraph_text" not in p:
            raise CorpusError(f"{where}: paragraphs[{i}] needs 'paragraph_text'")
        supporting = p.get("is_supporting", False)
        if not isinstance(supporting, bool):   # "false" would count as gold
            raise CorpusError(f"{where}: paragraphs[{i}].is_supporting must be true or false, got {supporting!r}")
        out.append(Paragraph(text_field(where, p, "title"), text_field(where, p, "paragraph_text"), supporting))
    aliases = obj.get("answer_aliases") or []
    if not isinstance(aliases, list):
        raise CorpusError(f"{where}: 'answer_aliases' must be a list of texts")
    return MultiHopQuestion(id_field(where, obj, "id"), text_field(where, obj, "question", required=True),
                            text_field(where, obj, "answer"),
                            tuple(text_value(where, f"answer_aliases[{k}]", a) for k, a in enumerate(aliases)),
                            "musique", tuple(out), split_field(where, obj))


def _hotpot_like(obj: dict, where: str) -> MultiHopQuestion | None:
    _require(obj, where, "_id", "question", "answer")
    context = obj.get("context") or []
    if not context:
        return None
    facts = obj.get("supporting_facts")
    if not isinstance(facts, list) or not facts:
        raise CorpusError(f"{where}: 'supporting_facts' must be a non-empty list of [title, sentence index]")
    titles = set()
    for k, f in enumerate(facts):
        if not (isinstance(f, (list, tuple)) and len(f) == 2):
            raise CorpusError(f"{where}: supporting_facts[{k}] must be [title, sentence index], got {str(f)[:80]!r}")
        titles.add(text_value(where, f"supporting_facts[{k}] title", f[0]))
    if not isinstance(context, list):
        raise CorpusError(f"{where}: 'context' must be a list of [title, [sentences]] paragraphs")
    out = []
    for pos, para in enumerate(context):
        if not (isinstance(para, list) and len(para) == 2 and isinstance(para[1], list)):
            raise CorpusError(f"{where}: context[{pos}] must be [title, [sentences]], got {str(para)[:80]!r}")
        title = text_value(where, f"context[{pos}] title", para[0])
        sentences = [text_value(where, f"context[{pos}] sentence {k}", s) for k, s in enumerate(para[1])]
        out.append(Paragraph(title, join_sentences(sentences), title in titles))
    return MultiHopQuestion(id_field(where, obj, "_id"), text_field(where, obj, "question", required=True),
                            text_field(where, obj, "answer"), (), text_field(where, obj, "type"), tuple(out),
                            split_field(where, obj))


def read_multihop(path: str | Path, strict: bool = False) -> MultiHopFile:
    """Every question of a HotpotQA / 2Wiki / MuSiQue JSON or JSONL file (format detected per record)."""
    path = Path(path)
    result = MultiHopFile([])
    seen: set[str] = set()
    for where, obj in _records(path):
        if not isinstance(obj, dict):
            raise CorpusError(f"{where}: expected a JSON object")
        fmt = "musique" if "paragraphs" in obj or ("id" in obj and "_id" not in obj) else "hotpotqa"
        q = _musique(obj, where) if fmt == "musique" else _hotpot_like(obj, where)
        if q is None:
            if strict:
                raise CorpusError(f"{where}: record has no paragraphs ('context'/'paragraphs' missing or empty)")
            result.skipped_without_paragraphs.append(where)
            continue
        if q.query_id in seen:
            raise CorpusError(f"{where}: duplicate question id {q.query_id!r}")
        seen.add(q.query_id)
        result.questions.append(q)
        result.format_counts[fmt] = result.format_counts.get(fmt, 0) + 1
    if not result.questions:
        raise CorpusError(f"{path}: no question with paragraphs")
    return result


def load_multihop(path: str | Path, corpus: str, strict: bool = False) -> tuple[list[Chunk], MultiHopFile, dict]:
    """Each question's paragraphs as chunks (the distractor setting: a question ranks only its own paragraphs).

    A paragraph's id is `<question id>/<position>`, unique even where MuSiQue repeats a title within a question;
    `metadata.supporting` is the reader's gold (MuSiQue `is_supporting`, HotpotQA/2Wiki `supporting_facts`).
    Records without paragraphs are skipped, counted in the report (`skipped_without_paragraphs`) and warned
    about; `strict=True` refuses the file instead. Returns (chunks, the parsed file, a load report)."""
    path = Path(path)
    data = read_multihop(path, strict=strict)
    chunks = [
        Chunk(chunk_id=f"{q.query_id}/{pos}", corpus=corpus, source="multihop", path=str(path), title=p.title,
              text=p.text, kind="paragraph",
              metadata={"query_id": q.query_id, "position": pos, "supporting": p.supporting})
        for q in data.questions for pos, p in enumerate(q.paragraphs)
    ]
    skipped = data.skipped_without_paragraphs
    if skipped:
        warnings.warn(f"{path}: {len(skipped)} record(s) without paragraphs skipped (first: {skipped[0]}); "
                      f"strict: true refuses such a file", CorpusWarning, stacklevel=2)
    report = {"questions": len(data.questions), "paragraphs": len(chunks),
              "gold_paragraphs": sum(len(q.gold) for q in data.questions),
              "skipped_without_paragraphs": len(skipped), "skipped_records": skipped[:20],
              "formats": dict(data.format_counts)}
    return chunks, data, report
