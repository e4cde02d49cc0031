"""Dagster's instance storage on PostgreSQL, holding its connections instead of opening one per
event.

dagster-postgres opens a fresh connection for every event it stores. A run over many document
partitions stores about ten events per document (planned and recorded materializations of five
assets), and on the benchmark corpus those connections alone cost more than parsing, chunking
and indexing together (bench/ingest.py). The webserver already gets a small pool through
`optimize_for_webserver`; this storage gives every process (daemon, run workers, `kb ingest`)
the same.
"""

from __future__ import annotations

from dagster._serdes import ConfigurableClassData
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

__all__ = ["PooledPostgresStorage"]

_STATEMENT_TIMEOUT_MS = 300_000  # generous: it guards Dagster's own queries, not ours
_POOL_RECYCLE_S = 3600
_MAX_OVERFLOW = 4


class PooledPostgresStorage(DagsterPostgresStorage):
    """DagsterPostgresStorage with one pooled connection (plus overflow) per storage."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._run_storage.optimize_for_webserver(
            _STATEMENT_TIMEOUT_MS, _POOL_RECYCLE_S, _MAX_OVERFLOW
        )
        self._event_log_storage.optimize_for_webserver(
            _STATEMENT_TIMEOUT_MS, _POOL_RECYCLE_S, _MAX_OVERFLOW
        )

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
