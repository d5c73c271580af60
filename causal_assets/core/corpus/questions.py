"""A user's questions file: the questions (with accepted answers and, optionally, gold documents) that make a
benchmark over any registered corpus (`loader: questions` in the benchmark registry).

JSON Lines (`.jsonl`, `.ndjson`, or a `.json` array) with `id`, `question`, `answer` (one or a list), optional
`gold` (document ids, or file paths of a folder or package corpus), `evidence` (per gold file, the passage of it that
answers: `{file: passage}`, also read from `metadata.evidence`) and `split`; or CSV / TSV with the same columns,
several values separated by `|` or given as a JSON array. Any other key is refused, so a typo is not silently
dropped, and so is a key given twice in one record (JSON would keep the last one, silently). Every record is checked
before any LLM time is spent, with one error naming the file, the line and the field; a question with gold but no
answer is kept for evaluation only. Format: docs/loaders.md.
"""
from __future__ import annotations

import csv
import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from causal_assets.core.corpus.fields import array_objects, id_field, parse_json, split_field, text_value
from causal_assets.core.corpus.folder import file_kind
from causal_assets.core.foundation.errors import CorpusError
from causal_assets.core.foundation.limits import MAX_ANSWER_CHARS, MAX_QUERY_CHARS

FIELDS = ("id", "question", "answer", "gold", "evidence", "split", "metadata")
REQUIRED = ("id", "question")
JSON_ONLY = ("evidence", "metadata")   # objects: JSON Lines only
LIST_SEPARATOR = "|"
CSV_SUFFIXES = {".csv": ",", ".tsv": "\t"}
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")


@dataclass(frozen=True)
class QuestionRecord:
    query_id: str
    question: str
    answers: tuple[str, ...]     # accepted answers, the first is the answer; () = none (evaluate only)
    gold: tuple[str, ...]        # document ids or file paths as written; () = none (the labels are the only truth)
    split: str | None            # the record's own split, or None (the benchmark's stable hash halves)
    where: str                   # "<file>:<line>", for errors found later (a gold entry the corpus lacks)
    # per gold entry, the verbatim passage of it that answers (`evidence`, or `metadata.evidence`): the gold
    # chunks are then those that hold it, however the corpus is chunked
    evidence: tuple[tuple[str, str], ...] = ()

    @property
    def answer(self) -> str:
        return self.answers[0] if self.answers else ""

    @property
    def aliases(self) -> tuple[str, ...]:
        return self.answers[1:]


@dataclass(frozen=True)
class QuestionFile:
    path: Path
    records: tuple[QuestionRecord, ...]

    @property
    def with_answers(self) -> int:
        return sum(bool(r.answers) for r in self.records)

    @property
    def with_gold(self) -> int:
        return sum(bool(r.gold) for r in self.records)

    @property
    def own_splits(self) -> list[str] | None:
        """The splits the records name, in first-seen order; None when no record names one."""
        named = [r.split for r in self.records if r.split is not None]
        return list(dict.fromkeys(named)) if named else None


def _strings(where: str, field: str, value) -> tuple[str, ...]:
    """A string or a list of strings (numbers taken as written); blanks dropped; null or [] is none."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, (dict, list, bool)) or item is None:
            name = f"{field}[{i}]" if isinstance(value, list) else field
            raise CorpusError(f"{where}: field {name!r} must be a string or a list of strings, got JSON "
                              f"{'object' if isinstance(item, dict) else 'array' if isinstance(item, list) else item!r}")
        text = text_value(where, field, item).strip()
        if text:
            out.append(text)
    return tuple(dict.fromkeys(out))


def _cell_list(where: str, field: str, cell: str) -> tuple[str, ...]:
    """A CSV cell holding one or more values: a JSON array, or values separated by `|`."""
    cell = (cell or "").strip()
    if cell.startswith("["):
        value = parse_json(f"{where}: field {field!r}", cell)
        if not isinstance(value, list):
            raise CorpusError(f"{where}: field {field!r} starts with '[' but is not a JSON array")
        return _strings(where, field, value)
    return _strings(where, field, [part for part in cell.split(LIST_SEPARATOR)])


def _record(where: str, obj: dict) -> QuestionRecord:
    unknown = [k for k in obj if k not in FIELDS]
    if unknown:
        raise CorpusError(f"{where}: unknown field {str(unknown[0])[:80]!r} (fields: {', '.join(FIELDS)})")
    for key in REQUIRED:
        if key not in obj:
            raise CorpusError(f"{where}: missing field {key!r}")
    qid = id_field(where, obj, "id")
    question = text_value(where, "question", obj.get("question")).strip()
    if not question:
        raise CorpusError(f"{where}: field 'question' has no text")
    _within(where, "question", question, MAX_QUERY_CHARS)
    split = split_field(where, obj)
    if "metadata" in obj and not isinstance(obj["metadata"], (dict, type(None))):
        raise CorpusError(f"{where}: field 'metadata' must be an object")
    answers = _strings(where, "answer", obj.get("answer"))
    for i, answer in enumerate(answers):
        _within(where, "answer" if len(answers) == 1 else f"answer[{i}]", answer, MAX_ANSWER_CHARS)
    gold = _strings(where, "gold", obj.get("gold"))
    return QuestionRecord(qid, question, answers, gold, split, where, _evidence(where, obj, gold))


def _within(where: str, field: str, text: str, limit: int) -> None:
    """A question goes into every prompt about it, and an answer is scored in every trial: a text longer than
    `search` and `ask` take is refused here, before any LLM call."""
    if len(text) > limit:
        raise CorpusError(f"{where}: field {field!r} is {len(text):,} characters; the limit is {limit:,}")


def _evidence(where: str, obj: dict, gold: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """`evidence` ({gold entry: passage}), or `metadata.evidence` in the same form; each key one of the record's
    gold entries, each passage non-blank text."""
    field, value = "evidence", obj.get("evidence")
    if value is None and isinstance(obj.get("metadata"), dict):
        field, value = "metadata.evidence", obj["metadata"].get("evidence")
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise CorpusError(f"{where}: field {field!r} must be an object {{gold file: passage}}")
    out = []
    for entry, passage in value.items():
        if entry not in gold:
            raise CorpusError(f"{where}: {field} names {entry!r}, which is not one of the question's gold entries "
                              f"({', '.join(repr(g) for g in gold) or 'none'})")
        text = text_value(where, f"{field}.{entry}", passage).strip()
        if not text:
            raise CorpusError(f"{where}: {field}.{entry} has no text")
        out.append((entry, text))
    return tuple(out)


def _jsonl_objects(path: Path, text: str):
    text = text.removeprefix("\ufeff")   # a BOM, as editors on Windows write (the CSV loader takes one too)
    if text.lstrip().startswith("["):   # a whole-file JSON array of the same objects
        yield from array_objects(path, text)
        return
    # lines end at "\n" only: str.splitlines() also cuts at U+2028, U+0085 and form feeds, which JSON allows
    # unescaped inside a string
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        obj = parse_json(where, line)
        if not isinstance(obj, dict):
            raise CorpusError(f"{where}: expected a JSON object per line, got {type(obj).__name__}")
        yield where, obj


def _csv_objects(path: Path, text: str, delimiter: str):
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader, None)
    except csv.Error as e:
        raise CorpusError(f"{path}:1: malformed CSV ({e})") from None
    if header is None:
        return
    header = [h.strip().lstrip("\ufeff").strip() for h in header]
    unknown = [h for h in header if h not in FIELDS or h in JSON_ONLY]
    if unknown:
        raise CorpusError(f"{path}:1: unknown column {unknown[0][:80]!r} in the header (columns: "
                          f"{', '.join(f for f in FIELDS if f not in JSON_ONLY)}); the first line names the columns")
    duplicated = [h for i, h in enumerate(header) if h in header[:i]]
    if duplicated:
        raise CorpusError(f"{path}:1: column {duplicated[0]!r} appears twice in the header")
    for key in REQUIRED:
        if key not in header:
            raise CorpusError(f"{path}:1: the header has no {key!r} column (columns: {', '.join(header)})")
    try:
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise CorpusError(f"{where}: {len(row)} cells for the header's {len(header)} columns")
            cells = dict(zip(header, row))
            obj: dict = {"id": cells["id"].strip(), "question": cells["question"]}
            for key in ("answer", "gold"):
                if key in cells:
                    obj[key] = list(_cell_list(where, key, cells[key]))
            if "split" in cells:
                obj["split"] = cells["split"]
            yield where, obj
    except csv.Error as e:
        raise CorpusError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None


def load_questions(path: str | Path) -> QuestionFile:
    """Every record of the questions file at `path` (module docstring), checked; in file order."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise CorpusError(f"{path}: questions file not found") from None
    except OSError as e:
        raise CorpusError(f"{path}: cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(mode):
        raise CorpusError(f"{path}: is a directory, not a questions file")
    if not stat.S_ISREG(mode):   # a FIFO would block the read, /dev/zero never end
        raise CorpusError(f"{path}: not a regular file ({file_kind(mode)}); a questions file is a file of text")
    suffix = path.suffix.lower()
    if suffix not in CSV_SUFFIXES and suffix not in JSON_SUFFIXES:
        raise CorpusError(f"{path}: a questions file is JSON Lines ({', '.join(JSON_SUFFIXES)}) or CSV with a "
                          f"header ({', '.join(CSV_SUFFIXES)}), told apart by the suffix")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise CorpusError(f"{path}: cannot read ({e.strerror or e})") from None
    objects = _csv_objects(path, text, CSV_SUFFIXES[suffix]) if suffix in CSV_SUFFIXES else _jsonl_objects(path, text)
    records: list[QuestionRecord] = []
    first_line: dict[str, str] = {}
    for where, obj in objects:
        if isinstance(obj.get("id"), str):
            obj = {**obj, "id": obj["id"].strip()}
        record = _record(where, obj)
        if record.query_id in first_line:
            raise CorpusError(f"{where}: duplicate id {record.query_id!r} (first at "
                              f"{first_line[record.query_id]})")
        first_line[record.query_id] = where
        if not record.answers and not record.gold:
            raise CorpusError(f"{where}: question {record.query_id!r} has neither an 'answer' (for Monte Carlo "
                              "labels) nor 'gold' documents (for evaluation): nothing to do with it")
        records.append(record)
    if not records:
        raise CorpusError(f"{path}: no questions")
    with_split = [r for r in records if r.split is not None]
    if with_split and len(with_split) != len(records):
        missing = next(r for r in records if r.split is None)
        raise CorpusError(f"{missing.where}: question {missing.query_id!r} has no 'split' while others have one "
                          f"(e.g. {with_split[0].where}): give every question its split, or none")
    return QuestionFile(path, tuple(records))
