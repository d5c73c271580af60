"""Typed fields of the JSON records in benchmark files (BEIR, HotpotQA, 2Wiki, MuSiQue): a value that is not what
its field holds stops with one error naming file, line and field, instead of becoming the text "None" or
"['x', 'y']", an id like `None/0`, or a string Parquet cannot store (a lone surrogate from a `\\ud800` escape,
which failed the evaluation's fourth output after three were written)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from causal_assets.core.foundation.errors import CorpusError
from causal_assets.core.foundation.strict_json import DECODER, DuplicateKey


def parse_json(where: str, line: str):
    """One JSON document; `where` names it (file and line, or the file of a whole-file document) in the error. A
    key given twice in one object is refused (json keeps the last one, silently), and so are NaN and Infinity."""
    try:
        return DECODER.decode(line)
    except DuplicateKey as e:
        raise CorpusError(duplicate_key_message(where, e.key)) from None
    except json.JSONDecodeError as e:
        at = f"{where}:{e.lineno}" if "\n" in line.rstrip() else where
        raise CorpusError(f"{at}: malformed JSON ({e.msg})") from None
    except RecursionError:
        raise CorpusError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as e:   # an integer of more digits than Python converts (4,300), or NaN / Infinity
        raise CorpusError(f"{where}: malformed JSON ({e})") from None


def duplicate_key_message(where: str, key) -> str:
    return (f"{where}: key {str(key)[:80]!r} given twice in one record (the last one would win, silently): "
            "give it once")


_BLANK = re.compile(r"[ \t\n\r]*")   # JSON's whitespace


def array_objects(path: Path, text: str):
    """(`path:line`, object) of each element of a whole-file JSON array, each parsed on its own with its keys
    given once, so that an error (a key given twice) names the line the element starts on."""
    pos = _BLANK.match(text, text.index("[") + 1).end()
    line, seen = 1, 0

    def line_of(at: int) -> int:
        nonlocal line, seen
        line, seen = line + text.count("\n", seen, at), at
        return line

    if text.startswith("]", pos):
        pos = _BLANK.match(text, pos + 1).end()
    else:
        while True:
            where = f"{path}:{line_of(pos)}"
            try:
                obj, pos = DECODER.raw_decode(text, pos)
            except DuplicateKey as e:
                raise CorpusError(duplicate_key_message(where, e.key)) from None
            except json.JSONDecodeError as e:
                raise CorpusError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None
            except RecursionError:
                raise CorpusError(f"{where}: JSON nested too deeply to read") from None
            except ValueError as e:   # NaN / Infinity, or an integer of more digits than Python converts
                raise CorpusError(f"{where}: malformed JSON ({e})") from None
            if not isinstance(obj, dict):
                raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            yield where, obj
            pos = _BLANK.match(text, pos).end()
            if text.startswith(",", pos):
                pos = _BLANK.match(text, pos + 1).end()
                continue
            if not text.startswith("]", pos):
                raise CorpusError(f"{path}:{line_of(pos)}: malformed JSON (expected ',' or ']' after an element)")
            pos = _BLANK.match(text, pos + 1).end()
            break
    if pos != len(text):
        raise CorpusError(f"{path}:{line_of(pos)}: malformed JSON (extra data after the array)")


def text_value(where: str, field: str, value) -> str:
    """A text: a string, or a number as written; null is no text (""). Objects, lists and booleans are refused."""
    if value is None:
        return ""
    if isinstance(value, (dict, list, bool)):
        raise CorpusError(f"{where}: field {field!r} is a JSON {_json_type(value)}, not text")
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise CorpusError(f"{where}: field {field!r} holds an unpaired surrogate ({text[e.start]!r} at character "
                          f"{e.start}), not text") from None
    return text


def text_field(where: str, obj: dict, field: str, required: bool = False) -> str:
    """`obj[field]` as text (`text_value`); `required`: absent, null or blank is refused."""
    text = text_value(where, field, obj.get(field))
    if required and not text.strip():
        raise CorpusError(f"{where}: field {field!r} has no text")
    return text


def id_field(where: str, obj: dict, field: str) -> str:
    """An id: a non-blank string or an integer (written as the file writes it)."""
    value = obj.get(field)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise CorpusError(f"{where}: field {field!r} must be a string or an integer id, got JSON "
                          f"{_json_type(value)} {str(value)[:80]!r}")
    text = text_value(where, field, value)
    if not text.strip():
        raise CorpusError(f"{where}: field {field!r} is a blank id")
    return text


def split_field(where: str, obj: dict) -> str | None:
    """A record's own `split` (a name: letters, digits, `_` or `-`), or None when it has none: where a file's records
    carry one, it decides which split each belongs to instead of the stable hash halves."""
    if obj.get("split") is None:
        return None
    split = text_value(where, "split", obj["split"]).strip()
    if not split:
        return None
    if not split.replace("_", "").replace("-", "").isalnum():
        raise CorpusError(f"{where}: field 'split' {split[:80]!r} must be a name (letters, digits, _ or -)")
    return split


def _json_type(value) -> str:
    return {dict: "object", list: "array", bool: "boolean", float: "number", int: "number", str: "string",
            type(None): "null"}.get(type(value), type(value).__name__)
