"""The LLM call cache and journal in PostgreSQL: the one every worker of several machines shares.

The same rows, reads and writes as `CallCache` (SQLite, core/llm/cache.py), which stays the cache of one machine:
SQLite's WAL needs its readers and writers on one host, so over a network filesystem it is not safe. Here every
`put` is its own committed transaction, so a killed worker loses no completed call, and at most one `ok` row exists
per key (a partial unique index): when two workers pay the same call at once, the first row stays, the second
`put` returns its id, and both serve the same answer from then on. The connection URL carries no password (libpq
reads it from PGPASSWORD or ~/.pgpass); psycopg2 comes with `dagster-postgres` (the `postgres` and `celery` extras).
"""
from __future__ import annotations

import os
import threading
from typing import Any

import psycopg2

from causal_assets.core.llm.cache import (_COLS, INSERT_COLS, CachedCall, ProcessConnection, journal_row,
                                           row_call)

SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_calls (
    id BIGSERIAL PRIMARY KEY,
    key TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT,
    text TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency_s DOUBLE PRECISION,
    created_at DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'error')),
    error TEXT,
    attempts INTEGER
);
CREATE INDEX IF NOT EXISTS llm_calls_key_status ON llm_calls (key, status, id);
CREATE UNIQUE INDEX IF NOT EXISTS llm_calls_one_ok ON llm_calls (key) WHERE status = 'ok';
CREATE TABLE IF NOT EXISTS file_digests (
    path TEXT NOT NULL,
    size BIGINT NOT NULL,
    mtime_ns BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    PRIMARY KEY (path, size, mtime_ns)
);
"""
# Two processes creating the schema at once race on CREATE ... IF NOT EXISTS (a unique violation on pg_type): the
# schema is created under this advisory lock.
_SCHEMA_LOCK = 0x6C6C6D5F63616368


class PostgresCallCache(ProcessConnection):
    """`CallCache`'s interface over a PostgreSQL database (`url`: postgresql://user@host:port/db)."""

    def __init__(self, url: str, connect_timeout_s: int = 10):
        self.url = url
        self.path = url   # what messages name, as CallCache's path
        self.connect_timeout_s = connect_timeout_s
        self._lock = threading.RLock()
        self._conn = None
        self._pid: int | None = None
        with self._cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            cur.execute(SCHEMA)

    def _connection(self):
        # one connection per process (reopened after fork), shared by threads under self._lock
        if self._conn is None or self._pid != os.getpid() or self._conn.closed:
            self._conn = psycopg2.connect(self.url, connect_timeout=self.connect_timeout_s)
            self._pid = os.getpid()
        return self._conn

    class _Transaction:
        def __init__(self, cache: "PostgresCallCache"):
            self.cache = cache

        def __enter__(self):
            self.cache._lock.acquire()
            self.conn = self.cache._connection()
            self.cur = self.conn.cursor()
            return self.cur

        def __exit__(self, exc_type, *exc):
            try:
                if exc_type is None:
                    self.conn.commit()
                else:
                    self.conn.rollback()
                self.cur.close()
            finally:
                self.cache._lock.release()

    def _cursor(self) -> "_Transaction":
        """A cursor whose statements commit together when the block ends (roll back when it raises)."""
        return self._Transaction(self)

    # -- reads --------------------------------------------------------------------------------------
    def get(self, key: str) -> CachedCall | None:
        with self._cursor() as cur:
            cur.execute(f"SELECT {_COLS} FROM llm_calls WHERE key = %s AND status = 'ok' ORDER BY id DESC LIMIT 1",
                        (key,))
            r = cur.fetchone()
        return row_call(r) if r else None

    def history(self, key: str | None = None) -> list[CachedCall]:
        sql, args = f"SELECT {_COLS} FROM llm_calls", ()
        if key is not None:
            sql, args = sql + " WHERE key = %s", (key,)
        with self._cursor() as cur:
            cur.execute(sql + " ORDER BY id", args)
            rows = cur.fetchall()
        return [row_call(r) for r in rows]

    def stats(self) -> dict[str, Any]:
        with self._cursor() as cur:
            cur.execute("SELECT COUNT(*), COUNT(*) FILTER (WHERE status = 'ok'), COUNT(*) FILTER (WHERE status = 'error'), "
                        "COUNT(DISTINCT key) FILTER (WHERE status = 'ok'), "
                        "COALESCE(SUM(prompt_tokens) FILTER (WHERE status = 'ok'), 0), "
                        "COALESCE(SUM(completion_tokens) FILTER (WHERE status = 'ok'), 0), "
                        "COALESCE(SUM(latency_s), 0.0) FROM llm_calls")
            r = cur.fetchone()
        return {"calls": r[0], "ok": r[1], "errors": r[2], "cached_keys": r[3], "prompt_tokens": int(r[4]),
                "completion_tokens": int(r[5]), "latency_s": float(r[6])}

    def file_digest(self, path: str, size: int, mtime_ns: int) -> str | None:
        with self._cursor() as cur:
            cur.execute("SELECT sha256 FROM file_digests WHERE path = %s AND size = %s AND mtime_ns = %s",
                        (path, size, mtime_ns))
            r = cur.fetchone()
        return r[0] if r else None

    def put_file_digest(self, path: str, size: int, mtime_ns: int, sha256: str) -> None:
        with self._cursor() as cur:
            cur.execute("INSERT INTO file_digests VALUES (%s, %s, %s, %s) ON CONFLICT (path, size, mtime_ns) "
                        "DO UPDATE SET sha256 = EXCLUDED.sha256", (path, size, mtime_ns, sha256))

    # -- writes -------------------------------------------------------------------------------------
    def put(self, key: str, model: str, request: dict, response: dict | None = None, text: str | None = None,
            prompt_tokens: int | None = None, completion_tokens: int | None = None,
            latency_s: float | None = None, status: str = "ok", error: str | None = None,
            attempts: int | None = None) -> int:
        """Journal one call, committed when this returns; for an `ok` call of a key that already has one, the id of
        the row that was there first (nothing is written)."""
        row = journal_row(key, model, request, response, text, prompt_tokens, completion_tokens, latency_s, status,
                          error, attempts)
        insert = f"INSERT INTO llm_calls ({INSERT_COLS}) VALUES ({', '.join(['%s'] * len(row))})"
        with self._cursor() as cur:
            if status == "error":
                cur.execute(insert + " RETURNING id", row)
                return int(cur.fetchone()[0])
            cur.execute(insert + " ON CONFLICT (key) WHERE status = 'ok' DO NOTHING RETURNING id", row)
            inserted = cur.fetchone()
            if inserted:
                return int(inserted[0])
            cur.execute("SELECT id FROM llm_calls WHERE key = %s AND status = 'ok'", (key,))
            return int(cur.fetchone()[0])


    def __repr__(self) -> str:
        return f"PostgresCallCache({self.url!r})"
