"""A persistent cache AND journal of LLM calls in SQLite.

One row per real call (ok or error), committed right after the call, so a crash loses no completed call. Lookups
return the newest `ok` row of a key; `error` rows are journal only, never served, so a later run retries them. WAL
mode and a busy timeout make it safe for several processes and threads. The key is the sha256 of the canonical JSON
of (model, kind, messages or prompt, params), plus the endpoint's base URL when given: the same model name behind
another URL is another model. The default local server (a fresh port each start, always the packaged model) gives
none. The API key is never part of it, and never stored.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from causal_assets.core.llm import ledger

SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT,
    text TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency_s REAL,
    created_at REAL NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'error')),
    error TEXT,
    attempts INTEGER
);
CREATE INDEX IF NOT EXISTS llm_calls_key_status ON llm_calls (key, status, id);
CREATE TABLE IF NOT EXISTS file_digests (
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    PRIMARY KEY (path, size, mtime_ns)
);
"""


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def normalize_endpoint(url: str | None) -> str | None:
    """The endpoint part of a key: scheme, host, port and path, lower-cased host, no trailing slash, no
    credentials or query string."""
    if not url:
        return None
    u = urlsplit(url.strip())
    host = (u.hostname or "").lower()
    port = f":{u.port}" if u.port else ""
    return f"{u.scheme.lower()}://{host}{port}{u.path.rstrip('/')}"


def make_key(model: str, kind: str, payload: Any, params: dict[str, Any] | None = None, *,
             endpoint: str | None = None) -> str:
    """sha256 of canonical JSON of (model, kind, messages-or-prompt, params[, endpoint]). `None`-valued params
    are dropped so `seed=None` and an absent seed share a key. Without `endpoint` the key is what it always was."""
    clean = {k: v for k, v in (params or {}).items() if v is not None}
    obj = {"model": model, "kind": kind, "input": payload, "params": clean}
    endpoint = normalize_endpoint(endpoint)
    if endpoint is not None:
        obj["endpoint"] = endpoint
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | os.PathLike, cache: "CallCache | None" = None) -> str:
    """sha256 of a file (a model's weights, a few hundred MB), read once per file: remembered by (resolved path,
    size, modification time) in this process and, with `cache`, in its database, so later processes and runs do
    not read the file again; a file replaced or rewritten in place gets a new modification time, so a new digest."""
    resolved = Path(path).resolve()
    st = resolved.stat()
    ident = (str(resolved), st.st_size, st.st_mtime_ns)
    digest = _DIGESTS.get(ident) or (cache.file_digest(*ident) if cache is not None else None)
    if digest is None:
        h = hashlib.sha256()
        with open(resolved, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        digest = h.hexdigest()
        if cache is not None:
            cache.put_file_digest(*ident, digest)
    _DIGESTS[ident] = digest
    return digest


@dataclass(frozen=True)
class CachedCall:
    id: int
    key: str
    model: str
    request: dict
    response: dict | None
    text: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float | None
    created_at: float
    status: str
    error: str | None
    attempts: int | None


_COLS = ("id, key, model, request, response, text, prompt_tokens, completion_tokens, latency_s, "
         "created_at, status, error, attempts")


def row_call(r: tuple) -> CachedCall:
    """A `_COLS` row as a CachedCall (either cache's reads)."""
    return CachedCall(r[0], r[1], r[2], json.loads(r[3]), json.loads(r[4]) if r[4] else None, *r[5:])


# The columns a journalled call is written in (`journal_row` gives the values in this order).
INSERT_COLS = ("key, model, request, response, text, prompt_tokens, completion_tokens, latency_s, created_at, "
               "status, error, attempts")


def journal_row(key: str, model: str, request: dict, response: dict | None, text: str | None,
                prompt_tokens: int | None, completion_tokens: int | None, latency_s: float | None, status: str,
                error: str | None, attempts: int | None) -> tuple:
    """The values of one journalled call, in `INSERT_COLS` order (either cache's `put`)."""
    if status not in ("ok", "error"):
        raise ValueError(f"status must be 'ok' or 'error', not {status!r}")
    return (key, model, canonical_json(request), canonical_json(response) if response is not None else None,
            text, prompt_tokens, completion_tokens, latency_s, time.time(), status, error, attempts)


class ProcessConnection:
    """A call cache's one connection per process (`_conn`, opened by `_pid`, guarded by `_lock`): closed by the
    process that opened it, never by a forked child; a context manager that closes it."""

    _conn: Any
    _pid: int | None
    _lock: threading.RLock

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CallCache(ProcessConnection):
    def __init__(self, path: str | os.PathLike, busy_timeout_s: float = 60.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None
        with self._lock:
            conn = self._connection()
            conn.executescript(SCHEMA)

    def _connection(self) -> sqlite3.Connection:
        # one connection per process (reopened after fork), shared by threads under self._lock
        if self._conn is None or self._pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            for _ in range(50):  # switching to WAL needs a moment of exclusivity
                try:
                    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                    break
                except sqlite3.OperationalError:
                    time.sleep(0.1)
            else:  # pragma: no cover
                mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":  # pragma: no cover - e.g. a filesystem without shared memory
                raise sqlite3.OperationalError(f"could not enable WAL on {self.path} (mode={mode})")
            conn.execute("PRAGMA synchronous = FULL")
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    # -- reads --------------------------------------------------------------------------------------
    def get(self, key: str) -> CachedCall | None:
        """The newest successful call for `key`, or None. Error rows are never returned."""
        with self._lock:
            r = self._connection().execute(
                f"SELECT {_COLS} FROM llm_calls WHERE key = ? AND status = 'ok' ORDER BY id DESC LIMIT 1",
                (key,)).fetchone()
        if not r:
            return None
        hit = row_call(r)
        if hit.response:   # served from the cache (a row without a response is not): the cost ledger's cached call
            ledger.record(hit.model, "cached", hit.prompt_tokens, hit.completion_tokens)
        return hit

    def history(self, key: str | None = None) -> list[CachedCall]:
        """Every journalled call (optionally of one key), oldest first."""
        sql, args = f"SELECT {_COLS} FROM llm_calls", ()
        if key is not None:
            sql, args = sql + " WHERE key = ?", (key,)
        with self._lock:
            rows = self._connection().execute(sql + " ORDER BY id", args).fetchall()
        return [row_call(r) for r in rows]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            r = self._connection().execute(
                "SELECT COUNT(*), COALESCE(SUM(status = 'ok'), 0), COALESCE(SUM(status = 'error'), 0), "
                "COUNT(DISTINCT CASE WHEN status = 'ok' THEN key END), "
                "COALESCE(SUM(CASE WHEN status = 'ok' THEN prompt_tokens END), 0), "
                "COALESCE(SUM(CASE WHEN status = 'ok' THEN completion_tokens END), 0), "
                "COALESCE(SUM(latency_s), 0.0) FROM llm_calls").fetchone()
        return {"calls": r[0], "ok": r[1], "errors": r[2], "cached_keys": r[3], "prompt_tokens": r[4],
                "completion_tokens": r[5], "latency_s": r[6]}

    def file_digest(self, path: str, size: int, mtime_ns: int) -> str | None:
        """The sha256 recorded for the file at `path` when it had this size and modification time, or None."""
        with self._lock:
            r = self._connection().execute(
                "SELECT sha256 FROM file_digests WHERE path = ? AND size = ? AND mtime_ns = ?",
                (path, size, mtime_ns)).fetchone()
        return r[0] if r else None

    def put_file_digest(self, path: str, size: int, mtime_ns: int, sha256: str) -> None:
        with self._lock:
            self._connection().execute("INSERT OR REPLACE INTO file_digests VALUES (?, ?, ?, ?)",
                                       (path, size, mtime_ns, sha256))

    # -- writes -------------------------------------------------------------------------------------
    def put(self, key: str, model: str, request: dict, response: dict | None = None, text: str | None = None,
            prompt_tokens: int | None = None, completion_tokens: int | None = None,
            latency_s: float | None = None, status: str = "ok", error: str | None = None,
            attempts: int | None = None) -> int:
        """Journal one call and commit immediately. Returns the row id."""
        row = journal_row(key, model, request, response, text, prompt_tokens, completion_tokens, latency_s, status,
                          error, attempts)
        with self._lock:
            cur = self._connection().execute(
                f"INSERT INTO llm_calls ({INSERT_COLS}) VALUES ({', '.join('?' * len(row))})",
                row)  # autocommit mode: durable when execute returns
        ledger.record(model, "paid" if status == "ok" else "errored", prompt_tokens, completion_tokens, latency_s)
        return int(cur.lastrowid)


    def __repr__(self) -> str:
        return f"CallCache({str(self.path)!r})"
