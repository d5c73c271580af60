"""Reading a YAML/JSON registry of named entries into pydantic models, with errors naming file, entry and field."""
from __future__ import annotations

import json
import re
import reprlib
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from causal_assets.core.foundation.errors import ConfigError
from causal_assets.core.foundation.strict_json import DuplicateKey, non_finite, unique_keys

M = TypeVar("M", bound=BaseModel)

MAX_REPR_CHARS = 200
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxtuple, _REPR.maxset = 3, 6, 6, 6, 6
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = MAX_REPR_CHARS, MAX_REPR_CHARS, 60


def short_repr(value, limit: int = MAX_REPR_CHARS) -> str:
    """A repr bounded in size *while it is built* (depth, items, string length), then cut to `limit` characters:
    a YAML alias bomb of a few hundred bytes expands to megabytes under the plain repr."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# A registry holds a few hundred values. A YAML alias bomb of a few hundred bytes loads as shared references, then
# expands ~9x a level wherever it is copied (pydantic's model_dump took 13 s and 1 GB at 7 levels, a step died at 8).
MAX_VALUES = 100_000


def _expands_past(data, limit: int) -> bool:
    """Whether `data`, with every shared reference counted each time it appears, holds more than `limit` values.
    Stops counting at `limit`, so a bomb costs no more than that to detect."""
    count, stack = 0, [data]
    while stack:
        value = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return False


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, refusing a key given twice in one mapping: the last one silently won (a second
    `path:` in an entry, a second `corpora:` list replacing the first)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)):   # unhashable keys fail pydantic's validation
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {short_repr(key)}",
                                                            key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def _json(path: Path, text: str):
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKey as e:
        raise ConfigError(f"{path}: malformed JSON ({e})") from None


def entry_name(entry) -> str:
    """` (entry 'acme')` for an entry with a name, to find it in a long registry; else ""."""
    name = entry.get("name") if isinstance(entry, dict) else None
    return f" (entry {short_repr(name, 60)})" if isinstance(name, str) and name else ""


# An entry-level check names its field at the start of its message: "monte_carlo.budget: budget 2 cannot ..."
_FIELD_FIRST = re.compile(r"^([A-Za-z_][\w.]*): (.*)$", re.DOTALL)


def load_entries(path: str | Path, key: str, model: type[M], context: dict | None = None) -> dict[str, M]:
    """The entries of the `key` list of the registry at `path`, each validated by `model` (with `context` for
    validators that need it, e.g. the registry's own directory). Any problem is one `ConfigError` naming the file,
    the entry and the field."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: registry not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a registry file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the registry ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 ({e.reason} at byte {e.start}); a registry is UTF-8 text") \
            from None
    try:
        data = _json(path, text) if path.suffix == ".json" else yaml.load(text, Loader=UniqueKeyLoader)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: malformed YAML ({getattr(e, 'problem', e)})") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise ConfigError(f"{path}: expected a mapping with a {key!r} list")
    if _expands_past(data, MAX_VALUES):
        raise ConfigError(f"{path}: expands to more than {MAX_VALUES:,} values (YAML aliases repeating aliases?); "
                          "a registry is a few hundred")

    entries: dict[str, M] = {}
    for i, entry in enumerate(data[key]):
        bad = non_finite(entry)
        if bad:   # YAML's .nan / .inf, JSON's NaN / 1e999, anywhere in an entry (a NaN hybrid weight ran)
            raise ConfigError(f"{path}: {key}[{i}].{bad[0] or 'entry'}: Input should be a finite number (value: "
                              f"{bad[1]}){entry_name(entry)}")
        try:
            item = model.model_validate(entry, context=context)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            named = _FIELD_FIRST.match(msg) if not field else None
            if named:
                field, msg = named.groups()
            msg = msg if len(msg) <= 2 * MAX_REPR_CHARS else msg[: 2 * MAX_REPR_CHARS - 3] + "..."
            value = f" (value: {short_repr(err.get('input'))})" if err["loc"] else ""
            raise ConfigError(f"{path}: {key}[{i}].{(field or 'entry')[:MAX_REPR_CHARS]}: {msg}{value}"
                              f"{entry_name(entry)}") from None
        name = getattr(item, "name")
        if name in entries:
            raise ConfigError(f"{path}: {key}[{i}].name: duplicate name {short_repr(name)}")
        entries[name] = item
    return entries
