"""Following the primary's index changes for the read fence: LISTEN for the notice every
change of the index version sends at its commit (sql/012_index_change_notice.sql), and on each
one move the fence to the primary's WAL position, read after that commit."""

from __future__ import annotations

import asyncio
import logging

import psycopg

from kb_core.queries import query
from kb_core.read_routing import Fence

__all__ = ["follow_index_changes"]

log = logging.getLogger(__name__)

CHANNEL = "kb_index_changed"
RETRY_S = 1.0


async def follow_index_changes(url: str, fence: Fence) -> None:
    """Keep `fence` at or past every index change committed on the primary at `url`, until
    cancelled. While the notices cannot be followed the fence is unknown, and only the primary
    answers: a change made meanwhile would go unnoticed."""
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                # LISTEN before reading the position: a change committed before the read is
                # covered by it, one committed after it sends a notice.
                await conn.execute(f"LISTEN {CHANNEL}")  # a fixed name, not input
                while True:
                    cursor = await conn.execute(query("wal_position"))
                    fence.advance((await cursor.fetchone())[0])
                    async for _ in conn.notifies(stop_after=1):
                        pass  # notices that arrive meanwhile wait in the connection's backlog
        except (psycopg.Error, OSError) as exc:
            fence.forget()
            log.warning("following the primary's index changes failed (%s): searches stay on "
                        "the primary until it works again", str(exc).strip() or type(exc))
            await asyncio.sleep(RETRY_S)
