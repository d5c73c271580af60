"""Reading a YAML/JSON registry of named entries into pydantic models, with errors naming file, entry and field."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from causal_assets.core.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def load_entries(path: str | Path, key: str, model: type[M]) -> dict[str, M]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: registry not found") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: malformed YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise ConfigError(f"{path}: expected a mapping with a {key!r} list")
    entries: dict[str, M] = {}
    for i, entry in enumerate(data[key]):
        try:
            item = model.model_validate(entry)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(x) for x in err["loc"]) or "entry"
            raise ConfigError(f"{path}: {key}[{i}].{field}: {err['msg']} (value: {err.get('input')!r})") from None
        name = getattr(item, "name")
        if name in entries:
            raise ConfigError(f"{path}: {key}[{i}].name: duplicate name {name!r}")
        entries[name] = item
    return entries
