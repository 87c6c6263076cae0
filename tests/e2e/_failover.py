"""The failover scenario: workers and a producer on a primary/standby pair, the primary
lost, the standby promoted, and what happened to every job.

:func:`run_scenario` runs it on any :class:`Cluster` (:func:`run_failover` on a
primary/standby pair), shared by ``tests/e2e/test_failover.py``,
``tests/e2e/test_patroni_failover.py`` (which assert the promises) and
``benchmarks/failover.py`` (which prints the table of docs/guides/high-availability.md).
It:

1. starts the cluster: a :class:`~tests.e2e._replicas.ReplicaPair` (synchronous or not)
   or a Patroni cluster; the database is created and migrated on the primary over its
   own DSN (``pgq migrate`` and ``pgqueue.db.migrate.upgrade`` are not given the
   multi-host DSN) before any standby copies it;
2. starts real ``pgq worker -A failover_tasks:q`` processes on the cluster's multi-host DSN
   (``target_session_attrs=read-write``) and a producer thread that enqueues one job
   every ``interval`` seconds, each in its own transaction on its own connection, and
   remembers each sequence number ``n`` whose COMMIT returned;
3. after ``before`` seconds of load, loses the primary (:data:`FAILURES`, or the
   cluster's own ways) and promotes a standby; keeps the load on for ``after``
   seconds, then stops the producer;
4. waits until ``lease + 5 s`` after the promotion (by the new primary's clock), the
   contract's bound for recovering a job that nobody runs, and reads the running rows
   that were claimed before the promotion (``stuck``); then waits for the rest to drain.

Jobs are told apart by the producer's ``n`` (the first argument), never by id: a lossy
failover makes PostgreSQL hand out ids again (``reused_ids`` counts the returned ids that
name another job afterwards).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg.conninfo import make_conninfo

from pgqueue.db.migrate import upgrade
from tests._polling import WaitTimeout, wait_until
from tests.e2e._chaos import Processes, query, scalar, task_app
from tests.e2e._replicas import ReplicaPair

__all__ = ["FAILURES", "Cluster", "FailoverResult", "run_failover", "run_scenario"]

DBNAME = "failover"
RECOVERY_GRACE = 5.0  # the contract: a job nobody runs is recovered within lease + 5 s

# How the primary is lost: (synchronous replication, what happens).
FAILURES = {
    "sync-kill": (True, "kill"),              # kill -9, synchronous replication
    "async-switchover": (False, "switchover"),  # pg_ctl stop -m fast, then promote
    "async-lag-kill": (False, "lag-kill"),    # WAL sender frozen for `lag` s, kill -9
}


@dataclass
class FailoverResult:
    """What happened to the jobs of one run (sequence numbers ``n`` unless named ids)."""

    failure: str
    committed: int                  # enqueues whose COMMIT returned
    uncertain: int                  # enqueues whose COMMIT raised (maybe committed)
    lost: list[int]                 # committed, but not on the new primary
    duplicate_effects: list[int]    # more than one committed effect
    stuck: list[int]                # job ids claimed before the promotion, still running
                                    # lease + 5 s after it
    first_claim_seconds: float | None  # promotion -> first claim on the new primary
    unfinished: list[int]           # job ids not finished when the drain ended
    dead: int                       # rows in dead_jobs
    reused_ids: int                 # returned ids that name another job afterwards
    outage_seconds: float           # primary lost -> new primary takes writes
    committed_before: int = 0       # enqueues committed before the primary was lost
    committed_after: int = 0        # and after the promotion
    logs: str = field(repr=False, default="")

    def row(self) -> dict[str, Any]:
        """The figures, for a table or JSON."""
        return {"failure": self.failure, "committed": self.committed,
                "committed_before": self.committed_before,
                "committed_after": self.committed_after,
                "uncertain": self.uncertain, "lost": len(self.lost),
                "duplicate_effects": len(self.duplicate_effects), "stuck_running": len(self.stuck),
                "first_claim_seconds": (None if self.first_claim_seconds is None
                                        else round(self.first_claim_seconds, 3)),
                "unfinished": len(self.unfinished), "dead": self.dead,
                "reused_ids": self.reused_ids,
                "outage_seconds": round(self.outage_seconds, 3)}


class _Producer(threading.Thread):
    """Enqueues job ``n`` every ``interval`` seconds, one transaction each, reconnecting
    (to whichever server takes writes) whenever the connection fails."""

    def __init__(self, app: Any, dsn: str, interval: float, seconds: float) -> None:
        super().__init__(name="failover-producer", daemon=True)
        self.app, self.dsn, self.interval, self.seconds = app, dsn, interval, seconds
        self.committed: dict[int, int] = {}  # n -> id returned
        self.committed_at: dict[int, float] = {}  # n -> when its COMMIT returned
        self.uncertain: set[int] = set()
        self.stopping = threading.Event()
        self.failures = 0

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        n = 0
        next_at = time.monotonic()
        while not self.stopping.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(self.dsn)
                job = self.app.effect.using(conn=conn).enqueue(n, self.seconds)
            except psycopg.Error:
                self._failed(conn)
                conn = None
                continue  # not committed: the same n again
            try:
                conn.commit()
            except psycopg.Error:
                self.uncertain.add(n)  # the COMMIT may have been applied
                self._failed(conn)
                conn = None
            else:
                self.committed[n] = job.id
                self.committed_at[n] = time.monotonic()
            n += 1
            next_at += self.interval
            self.stopping.wait(max(0.0, next_at - time.monotonic()))
        if conn is not None:
            conn.close()

    def _failed(self, conn: psycopg.Connection[Any] | None) -> None:
        self.failures += 1
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        self.stopping.wait(0.05)


class Cluster(Protocol):
    """PostgreSQL servers that lose their primary: a :class:`ReplicaPair` or a Patroni
    cluster (``tests/e2e/_patroni.py``)."""

    def start(self, setup: Callable[[str], None], dbname: str) -> None:
        """Start the servers; ``setup`` creates database ``dbname`` on the primary (it is
        given the primary's maintenance DSN) before any standby copies it."""

    def dsn(self, dbname: str | None = None) -> str:
        """What clients use: every server, ``target_session_attrs=read-write``."""

    def lose_primary(self, how: str, lag: float) -> datetime:
        """Lose the primary ``how`` the cluster knows; the new primary's clock when it
        took writes."""

    def primary_dsn(self) -> str:
        """The writable server now, directly."""

    def logs(self) -> str:
        """The servers' logs, for failure messages."""

    def destroy(self) -> None:
        """Stop every process the cluster started and delete its files."""


def run_failover(failure: str, directory: Path, **options: Any) -> FailoverResult:
    """Run the scenario on a primary and its standby, losing the primary as
    :data:`FAILURES` says (see :func:`run_scenario` for the options)."""
    synchronous, how = FAILURES[failure]
    return run_scenario(ReplicaPair(synchronous=synchronous), failure, how, directory,
                        **options)


def run_scenario(
    cluster: Cluster,
    failure: str,
    how: str,
    directory: Path,
    *,
    workers: int = 2,
    concurrency: int = 8,
    lease: float = 5.0,
    interval: float = 0.005,
    task_seconds: float = 0.02,
    before: float = 4.0,
    after: float = 4.0,
    lag: float = 3.0,
    drain_timeout: float = 60.0,
) -> FailoverResult:
    """Run the scenario once on ``cluster`` (see the module docstring), losing its
    primary ``how``; every process and server it started is gone when it returns."""
    processes = Processes(directory)
    try:
        cluster.start(_setup, DBNAME)
        dsn = cluster.dsn()
        for number in range(workers):
            processes.start_worker(dsn, name=f"worker{number + 1}", app="failover_tasks:q",
                                   concurrency=concurrency, lease=lease, poll_interval=1.0)
        with task_app(dsn, "failover_tasks") as app:
            producer = _Producer(app, dsn, interval, task_seconds)
            producer.start()
            try:
                time.sleep(before)  # load on the primary: the phase being measured
                lost = datetime.now(UTC)  # this host's clock, as the servers' (loopback)
                lost_at = time.monotonic()
                promoted = cluster.lose_primary(how, lag)
                promoted_at = time.monotonic()
                time.sleep(after)  # load on the new primary
            finally:
                producer.stopping.set()
                producer.join(30)
        result = _judge(failure, cluster, processes, producer, lost, promoted, lease,
                        drain_timeout)
        result.committed_before = sum(1 for t in producer.committed_at.values()
                                      if t < lost_at)
        result.committed_after = sum(1 for t in producer.committed_at.values()
                                     if t > promoted_at)
        return result
    finally:
        processes.kill_all()
        cluster.destroy()


def _setup(maintenance_dsn: str) -> None:
    """The scenario's database on the primary: pgqueue migrated (over the primary's own
    DSN: migrating is not what is tested here), and the effects table."""
    with psycopg.connect(maintenance_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {DBNAME}")
    dsn = make_conninfo(maintenance_dsn, dbname=DBNAME)
    upgrade(dsn, "pgqueue")
    with task_app(dsn, "failover_tasks") as app, psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(app.EFFECTS)


def _judge(failure: str, cluster: Cluster, processes: Processes, producer: _Producer,
           lost_at: datetime, promoted: datetime, lease: float,
           drain_timeout: float) -> FailoverResult:
    new = cluster.primary_dsn()
    # The contract's bound for a job that nobody runs any more, by the new primary's
    # clock; only rows claimed before the promotion can have lost their execution.
    bound = promoted + timedelta(seconds=lease + RECOVERY_GRACE)
    wait_until(lambda: scalar(new, "SELECT clock_timestamp() >= %s", (bound,)),
               timeout=lease + RECOVERY_GRACE + 30, interval=0.1,
               message="lease + 5 s after the promotion")
    stuck = [row[0] for row in query(new, """
        SELECT id FROM pgqueue.jobs WHERE status = 'running' AND started_at < %s
         ORDER BY id""", (promoted,))]
    finished = "status IN ('succeeded', 'cancelled')"
    with contextlib.suppress(WaitTimeout):
        wait_until(lambda: not scalar(
            new, f"SELECT count(*) FROM pgqueue.jobs WHERE NOT ({finished})"
                 " AND NOT (id = ANY(%s))", (stuck,)),
            timeout=drain_timeout, interval=0.2, message="the jobs drained")
    unfinished = [row[0] for row in query(
        new, f"SELECT id FROM pgqueue.jobs WHERE NOT ({finished}) ORDER BY id")]
    rows = query(new, """
        SELECT (args->>0)::bigint, id FROM pgqueue.jobs
        UNION ALL SELECT (args->>0)::bigint, id FROM pgqueue.dead_jobs""")
    present = {int(n) for n, _ in rows}
    named = {int(job_id): int(n) for n, job_id in rows}  # id -> the n it holds now
    committed = producer.committed
    lost = sorted(set(committed) - present)
    reused = sum(1 for n, job_id in committed.items() if named.get(job_id, n) != n)
    duplicates = [row[0] for row in query(
        new, "SELECT n FROM failover_effects GROUP BY n HAVING count(*) > 1 ORDER BY n")]
    first = scalar(new, "SELECT min(started_at) FROM pgqueue.jobs WHERE started_at >= %s",
                   (promoted,))
    return FailoverResult(
        failure=failure, committed=len(committed), uncertain=len(producer.uncertain),
        lost=lost, duplicate_effects=duplicates, stuck=stuck,
        first_claim_seconds=None if first is None else (first - promoted).total_seconds(),
        unfinished=unfinished, dead=int(scalar(new, "SELECT count(*) FROM pgqueue.dead_jobs")),
        reused_ids=reused, outage_seconds=(promoted - lost_at).total_seconds(),
        logs=processes.logs() + "\n" + cluster.logs(),
    )
