"""Every connection a worker opens, and every setting of its session, with the reason.

Each service of the worker has a connection of its own (a slow statement in one never
queues behind another's), opened through a :class:`Link`: the service's way to the
database, made by :meth:`WorkerConnections.link` for one :class:`Session` below. Nothing
else in the worker sets a session parameter. Tasks get the only other connections, from
:class:`TaskConnections` (for ``ctx.transaction()`` and ``ctx.step()``), with PostgreSQL's
defaults: a task's own statements run as the user expects, and commit synchronously.

A :class:`Session` holds its settings as (name, value) pairs; how PostgreSQL gets them
depends on what the DSN leads to. Directly, or through a pooler in session mode, they
are set once per connection, by its first statement (``set_config``: PgBouncer refuses
them as startup ``options`` in every mode). Behind a pooler in transaction mode (the DSN
option ``pool_mode=transaction``, docs/guides/deployment.md) each transaction may run on
another server connection: there a service runs each round's statements inside
:meth:`Link.applied`, an explicit transaction that starts with ``SET LOCAL`` for each
pair (two round trips more than without a pooler: ``BEGIN``, the ``SET LOCAL``s in one
simple-protocol message, and ``COMMIT``). Not a pipeline ending in one ``Sync``: that
would save the round trips, but PgBouncer 1.18 under load left such pipelines waiting
for results that never came (every worker stalled, measured in
tests/e2e/test_pgbouncer_workers.py). Statements are never prepared there
(:attr:`Link.prepare`), and LISTEN, whose
notifications a transaction pooler cannot deliver, takes its own direct connection
(``--listen-dsn``) or none at all (``--no-listen``).

A new connection's first statement must finish within ``timings.SERVER_WAIT``: a pooler
in session mode with fewer server connections than its clients accepts the login, then
holds each statement until a server connection frees up (PgBouncer's
``query_wait_timeout``, two minutes by default), and the service would wait in silence.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import set_json_loads

from pgqueue.serialization import loads
from pgqueue.worker import timings

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

    def set_local(self) -> sql.Composed:
        """``SET LOCAL`` for each parameter, as one statement text without parameters (so
        psycopg sends it with the simple protocol, in one message)."""
        return sql.SQL("; ").join(
            sql.SQL("SET LOCAL {} = {}").format(sql.Identifier(name), sql.Literal(value))
            for name, value in self.parameters
        )

    def first_statement(self) -> tuple[str, list[str]]:
        """A new connection's first statement and its parameters: ``set_config`` of each
        parameter for the session (``SET``, as a function that takes parameters), or
        ``SELECT 1`` if there are none."""
        if not self.parameters:
            return "SELECT 1", []
        calls = ", ".join("set_config(%s, %s, false)" for _ in self.parameters)
        return f"SELECT {calls}", [text for pair in self.parameters for text in pair]


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
# plan_cache_mode = force_generic_plan: the claims are prepared, and PostgreSQL kept
# planning each one afresh (its generic plan's estimate was the higher), about 150 µs of
# server CPU per claim: 380 -> 230 µs for a claim of 10 jobs, 675 -> 510 µs for 50
# (benchmarks/claim_cost.py). The generic plan walks jobs_claim_idx just the same
# (tests/integration/test_claim_plan.py checks it). The limited claim, whose plan
# depends on its arrays, asks for custom plans again within its own transaction
# (queries.lock_limits).
#
# jit = off: a claim ranks the jobs it takes (which of them start, which are held) with
# a sort of at most MAX_CLAIM rows, and with sorts disabled PostgreSQL adds 1e10 to the
# estimate of that sort, past every JIT threshold: before PostgreSQL 18 each claim then
# compiled itself (1.8 s a claim on PostgreSQL 15). No statement of this connection is
# big enough for JIT to pay.
#
# fast_json: the claimed jobs' jsonb values (``args``, ``kwargs``, ``meta``) are decoded
# with orjson, the one place where the worker decodes JSON per job.
CLAIMS = Session(parameters=(("synchronous_commit", "off"), ("enable_sort", "off"),
                             ("plan_cache_mode", "force_generic_plan"), ("jit", "off")),
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
#
# jit = off: the start of held jobs (complete_and_start_jobs_*) reads the small queues,
# task_limits and limit_state tables, whose only plan is a sequential scan; disabled, it
# costs 1e10 in the estimate, past every JIT threshold, and before PostgreSQL 18 each
# batch then compiled itself (over a second a batch on PostgreSQL 15).
#
# plan_cache_mode = force_generic_plan: PostgreSQL otherwise kept planning the start of
# held jobs afresh at every batch (its estimate of the generic plan was the higher):
# 4.7 ms of server CPU per batch of 8 outcomes and 8 starts instead of 2.1 ms, on a
# loaded machine (complete_jobs alone: 1.4 ms). Every statement here finds its rows by
# primary key, which the generic plans do too.
#
# fast_json: the jobs a batch starts come back with their jsonb values, decoded with
# orjson as the claim's are.
COMPLETIONS = Session(parameters=(("enable_seqscan", "off"), ("jit", "off"),
                                  ("plan_cache_mode", "force_generic_plan")),
                      fast_json=True)

# Every other connection (heartbeat, listener, maintenance, start-up checks, removing
# the worker's row): PostgreSQL's defaults.
DEFAULTS = Session()


class WorkerConnections:
    """Opens the worker's connections: autocommit, named after the worker, link-checked.

    ``pooled``: ``dsn`` leads to a pooler in transaction mode (see the module docstring).
    ``listen_dsn``: where the listener connects, if not to ``dsn`` (a pooler in
    transaction mode cannot deliver notifications).
    """

    def __init__(self, dsn: str, worker_id: str, *, pooled: bool = False,
                 listen_dsn: str | None = None) -> None:
        self.dsn = dsn
        self.pooled = pooled
        self.listen_dsn = listen_dsn
        # What pg_stat_activity shows, so an operator can tell whose connection it is.
        self.application_name = f"pgqueue worker {worker_id}"[:63]

    async def connect(self, session: Session = DEFAULTS, *,
                      dsn: str | None = None) -> psycopg.AsyncConnection[Any]:
        """A new autocommit connection with ``session``'s settings (to ``dsn`` if given)."""
        pooled = self.pooled and dsn is None
        # Never prepare behind a transaction pooler: the next transaction may run on
        # another server connection. The session's settings are then applied in each
        # transaction (Link.applied) instead of here.
        extra: dict[str, Any] = {"prepare_threshold": None} if pooled else {}
        conn = await psycopg.AsyncConnection.connect(
            dsn or self.dsn, autocommit=True, application_name=self.application_name,
            **_LINK, **extra,
        )
        first = (DEFAULTS if pooled else session).first_statement()
        try:
            async with asyncio.timeout(timings.SERVER_WAIT):
                await conn.execute(*first)
        except TimeoutError:
            await conn.close()
            raise psycopg.OperationalError(
                f"the first statement on a new connection did not finish within "
                f"{timings.SERVER_WAIT:g}s: behind a pooler in session mode, give it a "
                f"server connection for each of every worker's connections "
                f"(docs/guides/deployment.md#pgbouncer)"
            ) from None
        except BaseException:
            await conn.close()
            raise
        if session.fast_json:
            set_json_loads(loads, conn)
        return conn

    def link(self, session: Session = DEFAULTS) -> Link:
        """How a service with ``session``'s settings reaches the database."""
        return Link(self, session)

    def listen_link(self) -> Link:
        """How the listener reaches the database: ``listen_dsn`` if given, else ``dsn``."""
        return Link(self, DEFAULTS, dsn=self.listen_dsn)


@dataclass(frozen=True)
class Link:
    """One service's way to the database: calling it opens a connection; statements that
    need the session's settings run inside :meth:`applied`; hot statements pass
    :attr:`prepare`."""

    connections: WorkerConnections
    session: Session
    dsn: str | None = None  # another DSN than the worker's (the listener's --listen-dsn)

    async def __call__(self) -> psycopg.AsyncConnection[Any]:
        return await self.connections.connect(self.session, dsn=self.dsn)

    @property
    def pooled(self) -> bool:
        """Whether this link leads to a pooler in transaction mode."""
        return self.connections.pooled and self.dsn is None

    @property
    def prepare(self) -> bool:
        """``prepare=`` for a statement run on every round: prepared at once, except
        behind a pooler in transaction mode, where nothing may be prepared."""
        return not self.pooled

    @contextlib.asynccontextmanager
    async def applied(self, conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
        """Run the statements of the block with the session's settings.

        Directly, the connection already has them. Behind a transaction pooler, the block
        is one transaction that sets them first (``SET LOCAL``), so all of it runs on one
        server connection with the settings, which end with it.
        """
        if not (self.pooled and self.session.parameters):
            yield
            return
        async with conn.transaction():
            await conn.execute(self.session.set_local())
            yield


@contextlib.asynccontextmanager
async def answered(what: str) -> AsyncIterator[None]:
    """Bound the block's database round trips by ``timings.STALL_TIMEOUT``: past it, the
    block is cancelled and fails with a retryable error naming ``what``, so the service
    logs it, reconnects and tries again instead of waiting forever."""
    limit = timings.STALL_TIMEOUT
    try:
        async with asyncio.timeout(limit):
            yield
    except TimeoutError:
        raise psycopg.OperationalError(
            f"no answer from the database within {limit:g}s ({what}); giving up on this "
            f"connection"
        ) from None


class TaskConnections:
    """Pools for ctx.transaction() and ctx.step(), opened only if a task asks for one."""

    def __init__(self, dsn: str, size: int, *, pooled: bool = False) -> None:
        self._dsn = dsn
        self._size = size
        # Autocommit: a step's one statement is one round trip, not three (BEGIN and
        # COMMIT are separate ones otherwise; measured 0.38 -> 0.31 ms per insert with
        # synchronous commit). ctx.transaction() opens its transaction explicitly
        # (conn.transaction()), which behaves the same in either mode.
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if pooled:  # behind a transaction pooler a task's connection must not prepare either
            self._kwargs["prepare_threshold"] = None
        self._sync: Any = None
        self._async: Any = None

    def sync_pool(self) -> Any:
        if self._sync is None:
            from psycopg_pool import ConnectionPool

            self._sync = ConnectionPool(self._dsn, min_size=0, max_size=self._size, open=True,
                                        name="pgqueue-tasks", kwargs=self._kwargs)
        return self._sync

    async def async_pool(self) -> Any:
        if self._async is None:
            from psycopg_pool import AsyncConnectionPool

            pool = AsyncConnectionPool(self._dsn, min_size=0, max_size=self._size, open=False,
                                       name="pgqueue-tasks-async", kwargs=self._kwargs)
            await pool.open()
            self._async = pool
        return self._async

    async def close(self) -> None:
        if self._async is not None:
            await self._async.close()
        if self._sync is not None:
            await asyncio.to_thread(self._sync.close)
