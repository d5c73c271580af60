"""Which call cache a location names: a SQLite file (core/llm/cache.py, one machine) or a PostgreSQL database URL
(core/llm/pg_cache.py, the workers of several machines; psycopg2 is loaded only then)."""
from __future__ import annotations

import os

from causal_assets.core.llm.cache import CallCache

DATABASE_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(location: str | os.PathLike) -> bool:
    """Whether a cache location names a PostgreSQL database rather than a SQLite file."""
    return str(location).startswith(DATABASE_SCHEMES)


def open_call_cache(location: str | os.PathLike):
    """The call cache at `location`: a SQLite file (one machine), or a PostgreSQL database URL (workers on several
    machines: core/llm/pg_cache.py; psycopg2 is loaded only then)."""
    if is_database_url(location):
        from causal_assets.core.llm.pg_cache import PostgresCallCache   # psycopg2: the `postgres` extra

        return PostgresCallCache(str(location))
    return CallCache(location)
