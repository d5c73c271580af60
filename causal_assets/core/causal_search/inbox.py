"""Submitted queries: one small JSON record per query, named by its id (first 8 hex of the query hash + "_" +
unix time). The CLI, the UI flow and the inbox sensor all go through here, so the Dagster partition key is the id
and the text lives in one place."""
from __future__ import annotations

import json
import os
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


def load(queries_dir: str | os.PathLike, qid: str) -> dict:
    path = Path(queries_dir) / f"{qid}.json"
    if not path.is_file():
        raise ConfigError(f"{path}: no submitted query with id {qid!r}")
    return json.loads(path.read_text())
