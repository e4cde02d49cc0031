"""The database a command works on: the embedded server (started when needed) or
KB_DATABASE_URL, migrated."""

from __future__ import annotations

import dataclasses

from kb_core.database import database_url
from kb_core.migrations import migrate
from kb_core.settings import Settings

__all__ = ["prepare_database"]


def prepare_database(settings: Settings) -> Settings:
    """`settings` with the database URL resolved, once the server runs and is migrated."""
    url = database_url(settings)
    migrate(url)  # logs each migration it applies
    return dataclasses.replace(settings, database_url=url)
