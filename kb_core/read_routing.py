"""Reads that a streaming replica may serve, fenced: a replica answers only when it has
replayed the primary's WAL up to the fence, the primary's WAL position when the latest change
of the index (documents, their groups, a publication, learned facts) became known; otherwise,
and whenever a replica fails, the primary answers.

The replay position is read on the connection that then runs the read, before the read's
transaction begins: in READ COMMITTED every later statement takes its snapshot after that
check, so it sees every commit up to the fence. (Read in the same statement or snapshot as the
search, the position could pass the fence after the snapshot was taken.)
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TypeVar

import msgspec
import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from kb_core.queries import query

__all__ = ["Fence", "ReadRouter", "Replica", "ReplicaStatus", "replica_name"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# A replica that failed (refused connections, broke one, gave none in time) is left alone this
# long; then one read tries it again while the others keep going to the primary.
RETRY_S = 5.0
# The longest a read waits for a replica's connection before the primary answers it instead.
CONNECTION_WAIT_S = 1.0
# How long a read that can use a second connection (a search's two legs at once) waits for one:
# none, in effect. An idle connection is taken; on a busy service the read goes on with one.
SPARE_WAIT_S = 0.001
# A standby cancels a query whose snapshot or locks stand in the way of replaying the
# primary's WAL ("conflict with recovery"): 40001 for snapshots and locks, 40P01 for a buffer
# pin deadlock, 57014 as some versions report a cancelled wait. The read is redone on the
# primary; the replica is fine.
_CONFLICTS = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected,
              psycopg.errors.QueryCanceled)


class Fence:
    """The WAL position (bytes) a replica must have replayed to serve reads; None while it is
    unknown (before the primary's notices are followed, or after following them failed, when a
    change may have gone unnoticed), and then only the primary serves."""

    def __init__(self) -> None:
        self._position: int | None = None
        self._lock = threading.Lock()

    @property
    def position(self) -> int | None:
        return self._position

    def advance(self, position: int) -> None:
        with self._lock:
            if self._position is None or position > self._position:
                self._position = position

    def forget(self) -> None:
        with self._lock:
            self._position = None


@dataclass
class Replica:
    """One streaming replica, its pool of search connections and what it did."""

    name: str
    pool: ConnectionPool
    down_until: float = 0.0  # time.monotonic() before which it is not tried
    probing: bool = False  # one read is trying it again after a failure
    served: int = 0
    behind: int = 0  # reads the primary answered because this replica had not reached the fence
    conflicts: int = 0  # reads cancelled by a recovery conflict, then answered by the primary
    failures: int = 0  # reads the primary answered because this replica failed
    last_error: str | None = None


class ReplicaStatus(msgspec.Struct, frozen=True):
    """What /readyz says of a replica."""

    name: str
    state: str  # serving, behind, down, not a standby
    lag_bytes: int | None  # how far its replay is behind the fence
    served: int
    behind: int  # reads the primary answered as this replica had not reached the fence
    conflicts: int
    failures: int
    error: str | None = None


def replica_name(url: str) -> str:
    """A replica's URL without its credentials, for logs and /readyz."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or urllib.parse.parse_qs(parts.query).get("host", [""])[0]
    port = f":{parts.port}" if parts.port else ""
    return f"{host}{port}{parts.path}"


class ReadRouter:
    """Runs a read on a replica that has reached the fence, else on the primary; a replica's
    failure or recovery conflict is never the caller's: the read is redone on the primary."""

    def __init__(self, primary: ConnectionPool, replicas: Sequence[Replica] = (),
                 fence: Fence | None = None) -> None:
        self.primary = primary
        self.replicas = list(replicas)
        self.fence = fence or Fence()
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def run(self, read: Callable[[psycopg.Connection], T]) -> T:
        """`read` on a fresh replica's connection or the primary's; `read` must only read, as a
        replica's failure midway makes it run again on the primary."""
        return self._run(lambda conn, _: read(conn), paired=False)

    def run_paired(self, read: Callable[[psycopg.Connection, psycopg.Connection | None], T]
                   ) -> T:
        """As `run`, `read` also given a second connection to the same server when one is idle
        (else None). It is taken after the first one's replay check, so it too sees every
        change up to the fence."""
        return self._run(read, paired=True)

    def _run(self, read: Callable[[psycopg.Connection, psycopg.Connection | None], T],
             paired: bool) -> T:
        fence = self.fence.position
        if fence is not None and self.replicas:
            start = next(self._turn)
            for i in range(len(self.replicas)):
                replica = self.replicas[(start + i) % len(self.replicas)]
                done, result = self._on_replica(replica, fence, read, paired)
                if done:
                    return result
        with self.primary.connection() as conn, _spare(self.primary, paired) as spare:
            return read(conn, spare)

    def _on_replica(self, replica: Replica, fence: int,
                    read: Callable[[psycopg.Connection, psycopg.Connection | None], T],
                    paired: bool) -> tuple[bool, T | None]:
        if not self._claim(replica):
            return False, None
        try:
            with replica.pool.connection(timeout=CONNECTION_WAIT_S) as conn:
                replayed = conn.execute(query("replay_position")).fetchone()[0]
                self._recovered(replica)
                if replayed is None or replayed < fence:
                    replica.behind += 1
                    return False, None
                with _spare(replica.pool, paired) as spare:
                    result = read(conn, spare)
        except _CONFLICTS as exc:
            replica.conflicts += 1
            log.info("read cancelled on replica %s (%s): the primary answers it", replica.name,
                     _first_line(exc))
            return False, None
        except (psycopg.OperationalError, PoolTimeout) as exc:
            self._failed(replica, exc)
            return False, None
        finally:
            if replica.probing:  # neither recovered nor failed: the next read tries again
                with self._lock:
                    replica.probing = False
        replica.served += 1
        return True, result

    def _claim(self, replica: Replica) -> bool:
        """Whether this read may use `replica`: not while it is left alone after a failure,
        and after that only one read at a time until one succeeds."""
        with self._lock:
            if not replica.down_until:
                return True
            if replica.probing or time.monotonic() < replica.down_until:
                return False
            replica.probing = True
            return True

    def _recovered(self, replica: Replica) -> None:
        if replica.down_until:
            with self._lock:
                replica.down_until, replica.probing, replica.last_error = 0.0, False, None
            log.info("replica %s answers again", replica.name)

    def _failed(self, replica: Replica, exc: Exception) -> None:
        with self._lock:
            replica.failures += 1
            replica.down_until = time.monotonic() + RETRY_S
            replica.probing = False
            replica.last_error = _first_line(exc)
        log.warning("replica %s failed (%s): the primary answers its reads for %.0f s",
                    replica.name, replica.last_error, RETRY_S)

    def status(self) -> list[ReplicaStatus]:
        """Each replica's state as a probe finds it now (a short query on its pool)."""
        fence = self.fence.position
        return [self._probe(replica, fence) for replica in self.replicas]

    def _probe(self, replica: Replica, fence: int | None) -> ReplicaStatus:
        counts = dict(served=replica.served, behind=replica.behind,
                      conflicts=replica.conflicts, failures=replica.failures)
        try:
            with replica.pool.connection(timeout=CONNECTION_WAIT_S) as conn:
                replayed = conn.execute(query("replay_position")).fetchone()[0]
        except (psycopg.OperationalError, PoolTimeout) as exc:
            return ReplicaStatus(replica.name, "down", None, error=_first_line(exc), **counts)
        if replayed is None:
            return ReplicaStatus(replica.name, "not a standby", None, **counts)
        self._recovered(replica)  # it answers: reads may use it again at once
        lag = None if fence is None else max(0, fence - replayed)
        state = "serving" if lag == 0 else "behind"
        return ReplicaStatus(replica.name, state, lag, **counts)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextmanager
def _spare(pool: ConnectionPool, wanted: bool) -> Iterator[psycopg.Connection | None]:
    """An idle connection of `pool` if `wanted` and one is there at once, else None."""
    conn = None
    if wanted:
        with suppress(PoolTimeout):
            conn = pool.getconn(timeout=SPARE_WAIT_S)
    try:
        yield conn
    finally:
        if conn is not None:
            pool.putconn(conn)
