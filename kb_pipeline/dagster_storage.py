"""Dagster's instance storage on PostgreSQL, holding its connections instead of opening one per
event, and writing a run's asset events in batches.

A run over many document partitions stores about ten events per document: the planned and the
recorded materialization of each of five assets. dagster-postgres opens a fresh connection for
every event, and writes each in two transactions of its own; on the benchmark corpus those
writes cost more than parsing, chunking and indexing together (bench/ingest.py --rebuild). This
storage keeps a small pool in every process that opens the instance (the webserver already
gets one through `optimize_for_webserver`), and turns on Dagster's batched event writes: a
step's materializations, and a run's planned materializations, go in a few statements. It also
keeps the documents partitions' keys, which a run reads many times, until they change, and
sets a pool's limit to the instance's default safely when two run workers start at once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import sqlalchemy as db
from dagster import DagsterEventType, EventLogEntry
from dagster._core.storage.base_storage import DagsterStorage
from dagster._core.storage.event_log.schema import (
    ConcurrencyLimitsTable,
    DynamicPartitionsTable,
    SqlEventLogStorageTable,
)
from dagster._serdes import ConfigurableClassData
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage import PostgresScheduleStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config
from sqlalchemy.dialects.postgresql import insert

if TYPE_CHECKING:
    from dagster_postgres.auth import PgTokenProvider

__all__ = ["PooledPostgresStorage"]

_STATEMENT_TIMEOUT_MS = 300_000  # generous: it guards Dagster's own queries, not ours
_POOL_RECYCLE_S = 3600
_MAX_OVERFLOW = 4
# Events per batched write. A rebuild's run plans 5 × 1,000 materializations (runs.py,
# MAX_REBUILT_PER_RUN); a statement of 1,000 serialized events stays a few megabytes.
_EVENT_BATCH_SIZE = 1000


class PooledPostgresStorage(DagsterPostgresStorage):
    """DagsterPostgresStorage with one pooled connection (plus overflow) per storage, and
    batched writes of asset events."""

    def __init__(
        self, postgres_url: str, should_autocreate_tables: bool = True,
        inst_data: ConfigurableClassData | None = None,
        token_provider: PgTokenProvider | None = None,
    ) -> None:
        # DagsterPostgresStorage's own, with the event log storage below.
        self.postgres_url = postgres_url
        self.should_autocreate_tables = should_autocreate_tables
        self._inst_data = inst_data
        self._run_storage = PostgresRunStorage(
            postgres_url, should_autocreate_tables, token_provider=token_provider)
        self._event_log_storage = _EventLogStorage(
            postgres_url, should_autocreate_tables, token_provider=token_provider)
        self._schedule_storage = PostgresScheduleStorage(
            postgres_url, should_autocreate_tables, token_provider=token_provider)
        DagsterStorage.__init__(self)
        for storage in (self._run_storage, self._event_log_storage):
            storage.optimize_for_webserver(_STATEMENT_TIMEOUT_MS, _POOL_RECYCLE_S, _MAX_OVERFLOW)
        # Dagster batches events only when this variable is set, and reads it in whichever
        # process stores them: the daemon (a sensor's runs are planned there), a run worker,
        # `kb ingest`. Every one of them opens its instance through this storage.
        os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", str(_EVENT_BATCH_SIZE))

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: dict
    ) -> PooledPostgresStorage:
        return cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )


class _EventLogStorage(PostgresEventLogStorage):
    """dagster-postgres's event log, with a run's planned materializations written in batches,
    the documents partitions' keys read again only when they changed, and a pool's default
    limit set in one statement."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        # partitions definition name -> ((count, greatest id) of its rows, its keys)
        self._partition_keys: dict[str, tuple[tuple[int, int | None], list[str]]] = {}

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """Planned materializations in one statement per batch, like recorded ones:
        dagster-postgres stores a batch of planned ones one event at a time, each in its own
        connection and transactions. The rows are the same: each event in the event log with
        its partition and tags, and the asset's entry updated with its latest event of the
        batch (each update overwrote the one before)."""
        planned: list[EventLogEntry] = []
        others: list[EventLogEntry] = []  # a run's plan holds its asset checks' plans too
        for event in events:
            kind = event.get_dagster_event().event_type
            (planned if kind == DagsterEventType.ASSET_MATERIALIZATION_PLANNED else others
             ).append(event)
        if others:
            super().store_event_batch(others)
        if not planned:
            return
        with self._connect() as conn:
            ids = [row[0] for row in conn.execute(
                self.prepare_insert_event_batch(planned).returning(SqlEventLogStorageTable.c.id))]
        latest = {event.get_dagster_event().asset_key: (event, event_id)
                  for event, event_id in zip(planned, ids, strict=True)}
        with self.index_transaction() as conn:
            self._store_asset_event_tags(conn, planned, ids)
            for event, event_id in latest.values():
                self._store_asset_event(conn, event, event_id)

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        """The keys, read again only when their rows changed.

        A run over a range of documents resolves the range to keys in every step, and so
        reads every key several times per step: 0.2-0.4 s each at 154,000 documents, a third
        of a rebuild run's time. Ids only grow, so any key added raises the greatest id and any
        key deleted lowers the count: the pair read first tells whether the keys read last
        time are still the keys, from whichever process changed them."""
        table = DynamicPartitionsTable
        with self.index_connection() as conn:
            count, last = conn.execute(
                db.select(db.func.count(), db.func.max(table.c.id))
                .where(table.c.partitions_def_name == partitions_def_name)).one()
        stamp, keys = self._partition_keys.get(partitions_def_name, (None, []))
        if stamp != (count, last):
            keys = list(super().get_dynamic_partitions(partitions_def_name))
            self._partition_keys[partitions_def_name] = ((count, last), keys)
        return list(keys)  # callers may change theirs

    def initialize_concurrency_limit_to_default(self, concurrency_key: str) -> bool:
        """Set the pool's limit to the instance's `pools: default_limit` (our KB_EMBED_STEPS),
        unless someone set it by hand, and give it as many slots.

        A run's first step of a pool calls this when the pool has no limit yet, or one set from
        an earlier default. Dagster's own inserts the row and, when that breaks the key's
        uniqueness, updates it in the same transaction, which the failed insert has already
        aborted: the update fails, and with it the step and its run. That happens whenever the
        default changed, and when two runs start the pool's first steps at once, as the two
        workers of `kb ingest` or the daemon do. One upsert instead: the second waits for the
        first's row lock, then finds the limit set, and the slots are counted under that lock.
        """
        default_limit = (self._instance.global_op_concurrency_default_limit
                         if self.has_instance else None)
        if default_limit is None or not self.has_default_pool_limit_col:
            return super().initialize_concurrency_limit_to_default(concurrency_key)
        self._reconcile_concurrency_limits_from_slots()
        table = ConcurrencyLimitsTable
        upsert = insert(table).values(
            concurrency_key=concurrency_key, limit=default_limit, using_default_limit=True)
        with self.index_transaction() as conn:
            changed = conn.execute(upsert.on_conflict_do_update(
                index_elements=[table.c.concurrency_key], set_={"limit": default_limit},
                where=table.c.using_default_limit,
            ).returning(table.c.id)).first()
            if changed:  # a limit set by hand keeps its slots
                self._allocate_concurrency_slots(conn, concurrency_key, default_limit)
        return True
