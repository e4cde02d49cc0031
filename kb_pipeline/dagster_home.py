"""DAGSTER_HOME for an installation: instance storage in our PostgreSQL server, a bounded run
queue and run monitoring, so a killed run does not stay STARTED; telemetry and the UI's
first-visit dialog off, as in docker/dagster.yaml."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from kb_core.database_server import dagster_storage_url
from kb_core.settings import Settings

__all__ = ["dagster_instance", "prepare_dagster_home"]


def _instance_config(storage_url: str, embedding_steps: int) -> dict:
    return {
        "storage": {
            "custom": {
                "module": "kb_pipeline.dagster_storage",
                "class": "PooledPostgresStorage",
                "config": {"postgres_url": storage_url},
            }
        },
        # pools: the `embedding` pool's steps (KB_EMBED_STEPS), the only pool we declare.
        "concurrency": {"runs": {"max_concurrent_runs": 2},
                        "pools": {"default_limit": embedding_steps}},
        "run_monitoring": {
            "enabled": True,
            # A killed run's pool slot is freed once it is marked failed.
            "free_slots_after_run_end_seconds": 5,
            "start_timeout_seconds": 180,
            "max_resume_run_attempts": 0,
            "poll_interval_seconds": 30,
        },
        # Offline and unattended: no usage reports, no first-visit dialog in the UI.
        "telemetry": {"enabled": False},
        "nux": {"enabled": False},
    }


def prepare_dagster_home(settings: Settings) -> Path:
    """Write dagster.yaml under KB_HOME (the DAGSTER_HOME of `kb up`'s children); return the
    folder."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_dump(
        _instance_config(dagster_storage_url(settings), settings.embedding_steps),
        sort_keys=False)
    target = home / "dagster.yaml"
    if not target.exists() or target.read_text() != config:
        target.write_text(config)
    return home


def dagster_instance(settings: Settings) -> dg.DagsterInstance:
    """The installation's Dagster instance, for runs executed in this process."""
    return dg.DagsterInstance.from_config(str(prepare_dagster_home(settings)))
