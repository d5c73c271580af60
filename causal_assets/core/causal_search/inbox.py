"""Submitted queries: one small JSON record per query, named by its id (first 8 hex of the query hash + "_" +
unix time). The CLI, the UI flow and the inbox sensor all go through here, so the Dagster partition key is the id
and the text lives in one place."""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from causal_assets.core.causal_search.search import query_id
from causal_assets.core.errors import ConfigError

MAX_QUERY_CHARS = 2000


def submit(queries_dir: str | os.PathLike, query: str, corpus: str, now: float | None = None) -> str:
    query = " ".join(query.split())
    if not query:
        raise ConfigError("query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ConfigError(f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    qid = query_id(query, now if now is not None else time.time())
    path = Path(queries_dir) / f"{qid}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"query_id": qid, "query": query, "corpus": corpus}, ensure_ascii=False))
    tmp.replace(path)
    return qid


ID_PATTERN = re.compile(r"^[0-9a-f]{8}_\d+$")


# A question typed as a partition key is also the name of the asset's Parquet file (and file names are at most 255
# bytes), so it is held to a shorter limit than submitted queries.
MAX_KEY_BYTES = 200


def check_typed_key(key: str) -> str:
    """The partition key as a usable question, or a ConfigError that says why not and what to do instead."""
    query = " ".join(key.split())
    if not query:
        raise ConfigError("partition key is not a usable query (empty after trimming whitespace)")
    if any(c in key for c in "/\\\0") or key.startswith("."):
        raise ConfigError(f"partition key {key[:80]!r} contains '/', '\\', NUL or starts with '.': it would be used "
                          "as a file name; submit this question with `causal-assets ask` or the inbox instead")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ConfigError(f"partition key is {len(key.encode('utf-8'))} bytes in UTF-8; a question typed as a "
                          f"partition key is also a file name, so the limit is {MAX_KEY_BYTES} bytes: submit longer "
                          "questions with `causal-assets ask` or the inbox")
    return query


def load(queries_dir: str | os.PathLike, key: str, default_corpus: str | None = None) -> dict:
    """The record of a submitted query id. A key that is not an id is the query itself (typed as a new partition
    in the UI): it is adopted as a record with `default_corpus`, keeping the key as its id."""
    if ID_PATTERN.match(key):
        path = Path(queries_dir) / f"{key}.json"
        if path.is_file():
            return json.loads(path.read_text())
        raise ConfigError(f"{path}: no submitted query with id {key!r}")
    if default_corpus is None:
        raise ConfigError(f"{Path(queries_dir) / key}.json: no submitted query with id {key!r}")
    query = check_typed_key(key)
    path = Path(queries_dir) / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    record = {"query_id": query_id(query, time.time()), "query": query, "corpus": default_corpus, "partition_key": key}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, ensure_ascii=False))
    tmp.replace(path)
    return record
