"""PostgreSQL instance storage whose pool slots hold when two runs claim one at the same moment.

Dagster 1.13.27's PostgreSQL event log runs each statement in autocommit. A step claims a pool slot by selecting a
free slot row `FOR UPDATE` and then updating that row by its id; the row lock ends with the select, and the update does
not check that the row is still free. Two runs whose steps claim the last slot within the same few milliseconds both
get it: four runs launched at once on a one-slot pool held it twice in 33 of 200 rounds on this machine. For the `llm`
pool that means two labelling steps on one llama.cpp server, the limit the pool exists to keep.

`PostgresEventLogStorage` here claims a slot in one statement, an update of a free row that still checks the row is
free, so exactly one claimant gets each slot and the others keep waiting as they would for a busy slot. Everything
else is dagster-postgres's own. `PostgresStorage` is `DagsterPostgresStorage` with that event log, named in
`deploy/dagster.yaml` (`storage: custom:`, the same `postgres_db` settings). It overrides one private method of
Dagster's storage, `_claim_concurrency_slot`, listed in `dagster_private.py` with the private names it uses.
"""
from __future__ import annotations

import sqlalchemy as db
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres import PostgresEventLogStorage as _PostgresEventLogStorage
from dagster_postgres.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage import PostgresScheduleStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

from causal_assets.dagster_private import class_data, slot_status

# One statement: take a free slot row nobody holds a lock on, and set its holder only if it is still free.
CLAIM_FREE_SLOT = db.text("""
    UPDATE concurrency_slots SET run_id = :run_id, step_key = :step_key
    WHERE id = (SELECT id FROM concurrency_slots
                WHERE concurrency_key = :key AND step_key IS NULL AND deleted = false
                ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
      AND step_key IS NULL
    RETURNING id""")


class PostgresEventLogStorage(_PostgresEventLogStorage):
    """dagster-postgres's event log, with a pool slot claimed atomically."""

    def _claim_concurrency_slot(self, concurrency_key: str, run_id: str, step_key: str):
        with self.index_connection() as conn:
            claimed = conn.execute(CLAIM_FREE_SLOT, {"run_id": run_id, "step_key": step_key,
                                                     "key": concurrency_key}).fetchone()
        return slot_status(claimed is not None)


class PostgresStorage(DagsterPostgresStorage):
    """`DagsterPostgresStorage` (runs, event logs, schedules in PostgreSQL) with the event log above."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True, inst_data=None, token_provider=None):
        self.postgres_url = postgres_url
        self.should_autocreate_tables = should_autocreate_tables
        self._inst_data = inst_data
        self._run_storage = PostgresRunStorage(postgres_url, should_autocreate_tables, token_provider=token_provider)
        self._event_log_storage = PostgresEventLogStorage(postgres_url, should_autocreate_tables,
                                                          token_provider=token_provider)
        self._schedule_storage = PostgresScheduleStorage(postgres_url, should_autocreate_tables,
                                                         token_provider=token_provider)
        super(DagsterPostgresStorage, self).__init__()

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> PostgresStorage:
        return cls(inst_data=inst_data, postgres_url=pg_url_from_config(config_value),
                   should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                   token_provider=get_token_provider_from_config(config_value))

    @property
    def event_storage_data(self):
        if self.inst_data is None:
            return None
        return class_data(__name__, PostgresEventLogStorage.__name__, self.inst_data.config_yaml)
