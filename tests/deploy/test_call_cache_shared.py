"""The call cache shared by workers: two processes paying the same call at the same moment, on a throwaway PostgreSQL
cluster (the cache of several machines) and on one SQLite file (the cache of one machine). Nothing is lost, nothing
errs, and both processes serve the same answer from then on; in PostgreSQL the key has exactly one `ok` row."""
from __future__ import annotations

import multiprocessing
import os

import pytest

from causal_assets.core.foundation.errors import ConfigError
from causal_assets.core.llm.cache_location import open_call_cache
from causal_assets.settings import Settings
from tests.conftest import require_system
from tests.deploy.services import Postgres

pytestmark = pytest.mark.slow
KEY = "a" * 64
RACERS = 2
ROUNDS = 20


def racer(location: str, name: str, barrier, out) -> None:
    """Pay `ROUNDS` keys (the last one `KEY`), each at the same moment as the other racer, then read them back."""
    cache = open_call_cache(location)
    ids, texts = [], []
    for i in range(ROUNDS):
        key = KEY if i == ROUNDS - 1 else f"{i:064x}"
        barrier.wait(timeout=60)
        ids.append(cache.put(key, "gemma", {"prompt": key}, {"choices": []}, text=f"answer of {name}",
                             prompt_tokens=3, completion_tokens=1, latency_s=0.1))
        texts.append(cache.get(key).text)
    cache.close()
    out.put((name, ids, texts))


def race(location: str, env: dict[str, str] | None = None) -> list[tuple]:
    context = multiprocessing.get_context("spawn")   # fresh processes, as two workers are
    barrier, out = context.Barrier(RACERS), context.Queue()
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        procs = [context.Process(target=racer, args=(location, f"p{i}", barrier, out)) for i in range(RACERS)]
        for p in procs:
            p.start()
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return results


def test_two_processes_paying_one_key_at_once_in_postgres(tmp_path):
    require_system("postgresql")
    pg = Postgres()
    try:
        pg.start()
        url = f"postgresql://dagster@127.0.0.1:{pg.port}/postgres"
        assert Settings.from_env({"CAUSAL_ASSETS_LLM_CACHE": url}).llm_cache == url
        results = race(url, {"PGPASSWORD": pg.password})
        (_, ids_a, texts_a), (_, ids_b, texts_b) = results
        assert ids_a == ids_b and texts_a == texts_b   # each key: one row, whoever wrote it first
        os.environ["PGPASSWORD"] = pg.password
        try:
            cache = open_call_cache(url)
            assert [c.status for c in cache.history(KEY)] == ["ok"]
            assert cache.stats()["ok"] == cache.stats()["cached_keys"] == ROUNDS
            cache.close()
            with open_call_cache(url) as cache, open_call_cache(str(tmp_path / "calls.sqlite")) as sqlite:
                assert journal(cache) == journal(sqlite)   # the same rows, written and read alike
        finally:
            del os.environ["PGPASSWORD"]
    finally:
        pg.stop()


def journal(cache) -> list[tuple]:
    """An error row and an ok row of one key journalled in `cache`, as read back (ids and times aside); a status
    that is neither is refused, nothing written."""
    key = "b" * 64
    with pytest.raises(ValueError, match="status must be 'ok' or 'error', not 'maybe'"):
        cache.put(key, "gemma", {"prompt": "x"}, status="maybe")
    cache.put(key, "gemma", {"prompt": "x"}, status="error", error="HTTP 500", attempts=3, latency_s=0.5)
    cache.put(key, "gemma", {"prompt": "x"}, {"choices": [{"text": "y"}]}, text="y", prompt_tokens=2,
              completion_tokens=1, latency_s=0.25, attempts=1)
    assert cache.get(key).text == "y"
    return [(c.key, c.model, c.request, c.response, c.text, c.prompt_tokens, c.completion_tokens, c.latency_s,
             c.status, c.error, c.attempts) for c in cache.history(key)]


def test_two_processes_paying_one_key_at_once_in_sqlite(tmp_path):
    """One machine: the SQLite journal keeps both rows (no error, no lost write); both serve the newest."""
    path = str(tmp_path / "calls.sqlite")
    results = race(path)
    (_, ids_a, texts_a), (_, ids_b, texts_b) = results
    assert len(set(ids_a) | set(ids_b)) == 2 * ROUNDS    # every write kept
    cache = open_call_cache(path)
    assert {c.status for c in cache.history(KEY)} == {"ok"} and len(cache.history(KEY)) == 2
    assert cache.get(KEY).text in {"answer of p0", "answer of p1"}


def test_a_password_in_the_cache_url_is_refused_and_not_shown():
    with pytest.raises(ConfigError, match=r"PGPASSWORD") as e:
        Settings.from_env({"CAUSAL_ASSETS_LLM_CACHE": "postgresql://dagster:hunter2-secret@10.0.0.5:5432/calls"})
    assert "hunter2-secret" not in str(e.value)
