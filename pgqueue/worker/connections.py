"""Every connection a worker opens, and every setting of its session, with the reason.

Each service of the worker has a connection of its own (a slow statement in one never
queues behind another's), all opened by :meth:`WorkerConnections.connect` with the
settings of one :class:`Session` below. Nothing else in the worker sets a session
parameter. Tasks get the only other connections, from :class:`TaskConnections` (for
``ctx.transaction()``), with PostgreSQL's defaults: a task's own statements run as the
user expects, and commit synchronously.

A :class:`Session` holds its settings as (name, value) pairs, and only
:meth:`WorkerConnections.connect` turns them into something PostgreSQL sees: startup
``options`` today. PgBouncer in transaction mode refuses startup options and session
``SET``; there the same pairs must become ``SET LOCAL`` at the start of each
transaction, which changes how a connection is opened and used, not which settings
exist, why, or who asks for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import set_json_loads

from pgqueue.serialization import loads

Connect = Callable[[], Awaitable[psycopg.AsyncConnection[Any]]]

# Keepalives and tcp_user_timeout make a silently dead link (a partition, a host gone)
# fail within ~10-20 s instead of the kernel's default of many minutes; until it fails
# a service cannot notice and reconnect. connect_timeout bounds one connection attempt;
# services retry on their own terms (worker/service.py).
_LINK: dict[str, Any] = {
    "connect_timeout": 10, "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
    "keepalives_count": 3, "tcp_user_timeout": 10_000,
}


@dataclass(frozen=True)
class Session:
    """The session settings of one kind of worker connection."""

    parameters: tuple[tuple[str, str], ...] = ()
    # Decode jsonb with orjson (pgqueue.serialization.loads) instead of json.loads.
    fast_json: bool = False

    def options(self) -> str:
        """The ``-c name=value`` startup options that apply the parameters."""
        return " ".join(f"-c {name}={value}" for name, value in self.parameters)


# The producer's connection: claims and next_run_at.
#
# synchronous_commit = off: a claim does not wait for its WAL flush (measured 2.25 ms ->
# 0.85 ms per claim). Losing a claim loses no job: if PostgreSQL crashes before the claim
# reaches disk, the row is ``queued`` again and runs again (at-least-once, as promised).
# What the run did is fenced off by the claim's random ``lease_token``: the lost claim's
# token is gone from the row, so none of its outcomes can be recorded, even if this same
# worker claims the job again at the same attempt number. Every outcome, and every
# ``ctx.transaction()``, commits synchronously, which also flushes the claim it follows.
#
# enable_sort = off: the claim must walk ``jobs_claim_idx``, which is already in claim
# order, and stop after ``limit`` rows. When the statistics under-count the queued rows
# (a table not yet analysed, or analysed before a burst of enqueues), the planner
# otherwise may pick a bitmap scan (it picked ``jobs_run_at_idx``, the index revision 0003
# replaced) and sort *every* ready job on each claim: 12.8 ms instead of 0.56 ms per
# claim with 20,000 queued, growing with the backlog. The other statements on this
# connection (the resumed claims, ``next_run_at``) need no sort either.
#
# fast_json: the claimed jobs' jsonb values (``args``, ``kwargs``, ``meta``) are decoded
# with orjson, the one place where the worker decodes JSON per job.
CLAIMS = Session(parameters=(("synchronous_commit", "off"), ("enable_sort", "off")),
                 fast_json=True)

# The completer's connection: complete_jobs and notify_ready.
#
# enable_seqscan = off: complete_jobs is prepared (psycopg does so after five executions)
# and PostgreSQL may then cache a generic plan. Made while the table is small, that plan
# seq-scans jobs, and it is kept as the table grows: the write then costs O(rows) per
# batch (measured 0.7 s -> 33 s per batch within two minutes of a 4,100 jobs/s soak, when
# worker_id was still part of the fence). With sequential scans off, the primary key is
# the only way to a row, whatever the statistics said when the plan was made. No other
# statement on this connection scans.
COMPLETIONS = Session(parameters=(("enable_seqscan", "off"),))

# Every other connection (heartbeat, listener, maintenance, start-up checks, removing
# the worker's row): PostgreSQL's defaults.
DEFAULTS = Session()


class WorkerConnections:
    """Opens the worker's connections: autocommit, named after the worker, link-checked."""

    def __init__(self, dsn: str, worker_id: str) -> None:
        self.dsn = dsn
        # What pg_stat_activity shows, so an operator can tell whose connection it is.
        self.application_name = f"pgqueue worker {worker_id}"[:63]

    async def connect(self, session: Session = DEFAULTS) -> psycopg.AsyncConnection[Any]:
        """A new autocommit connection with ``session``'s settings."""
        extra: dict[str, Any] = {"options": session.options()} if session.parameters else {}
        conn = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, application_name=self.application_name,
            **_LINK, **extra,
        )
        if session.fast_json:
            set_json_loads(loads, conn)
        return conn

    def connector(self, session: Session = DEFAULTS) -> Connect:
        """A function that opens connections with ``session``'s settings (for a service)."""
        return lambda: self.connect(session)


class TaskConnections:
    """Pools for ctx.transaction(), opened only if a task asks for one."""

    def __init__(self, dsn: str, size: int) -> None:
        self._dsn = dsn
        self._size = size
        self._sync: Any = None
        self._async: Any = None

    def sync_pool(self) -> Any:
        if self._sync is None:
            from psycopg_pool import ConnectionPool

            self._sync = ConnectionPool(self._dsn, min_size=0, max_size=self._size, open=True,
                                        name="pgqueue-tasks")
        return self._sync

    async def async_pool(self) -> Any:
        if self._async is None:
            from psycopg_pool import AsyncConnectionPool

            pool = AsyncConnectionPool(self._dsn, min_size=0, max_size=self._size, open=False,
                                       name="pgqueue-tasks-async")
            await pool.open()
            self._async = pool
        return self._async

    async def close(self) -> None:
        if self._async is not None:
            await self._async.close()
        if self._sync is not None:
            await asyncio.to_thread(self._sync.close)
