"""The worker process: starts the services, handles signals, shuts down cleanly.

Services (each in its own module, each with its own connection):
producer (claims) → executor (runs; no SQL) → completer (writes outcomes, fenced);
heartbeat (leases, worker row); listener (NOTIFY wake-ups); maintenance (rescuer, pruner).

Shutdown (SIGTERM or SIGINT): stop claiming; let running jobs finish for up to
``shutdown_timeout``; then stop the rest and release them to ``queued`` at once with the
attempt given back; write every outcome; remove the worker row; exit 0. A second SIGINT
exits at once and leaves the rest to lease expiry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
import time
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import set_json_loads
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pgqueue.db.migrate import check_schema_async
from pgqueue.db.names import notify_channel
from pgqueue.errors import ConfigurationError, DatabaseUnavailable
from pgqueue.serialization import loads
from pgqueue.settings import parse_duration
from pgqueue.worker.backoff import Backoff, is_retryable
from pgqueue.worker.completer import CONNECTION_OPTIONS as COMPLETER_OPTIONS
from pgqueue.worker.completer import Completer
from pgqueue.worker.executor import Execution, Executor
from pgqueue.worker.heartbeat import Heartbeat
from pgqueue.worker.listener import Listener
from pgqueue.worker.maintenance import Maintenance
from pgqueue.worker.outcome import ClaimedJob, Outcome
from pgqueue.worker.producer import Producer
from pgqueue.worker.threads import DaemonThreadPool

if TYPE_CHECKING:
    from pgqueue.queue import Queue

logger = logging.getLogger("pgqueue.worker")

# How long shutdown keeps trying to record outcomes when the database is unreachable;
# after that the leases (which we stop renewing) hand the jobs to other workers.
FINAL_FLUSH_SECONDS = 15.0


class WorkerSettings(BaseModel):
    """How a worker runs. Durations accept seconds or strings like ``30s``, ``5m``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(default=8, ge=1, le=10_000)
    queues: list[str] = Field(default_factory=list)
    poll_interval: float = 5.0
    lease: float = 30.0
    shutdown_timeout: float = 30.0
    connect_timeout: float = 30.0
    burst: bool = False
    install_signal_handlers: bool = True
    rescue_interval: float = 1.0
    prune_interval: float = 30.0
    completion_flush_interval: float = 0.002

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "worker setting"
            message = str(first["msg"]).removeprefix("Value error, ")
            raise ConfigurationError(f"invalid worker setting {where}: {message}") from None

    @field_validator("poll_interval", "lease", "shutdown_timeout", "connect_timeout",
                     "rescue_interval", "prune_interval", "completion_flush_interval",
                     mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value, what="duration")

    @field_validator("lease")
    @classmethod
    def _lease_floor(cls, value: float) -> float:
        if value < 1:
            raise ValueError("lease must be at least 1 second")
        return value

    @field_validator("queues", mode="before")
    @classmethod
    def _split_queues(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        if isinstance(value, list | tuple):
            return [part for part in value if part]
        return value


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


class Worker:
    """One worker process's services and lifecycle."""

    def __init__(self, queue: Queue, settings: WorkerSettings) -> None:
        self.queue = queue
        self.settings = settings
        self.dsn = queue.dsn
        self.id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.executions: dict[int, Execution] = {}
        self._stop = asyncio.Event()
        self._interrupts = 0
        queries = queue.queries
        self.threads = DaemonThreadPool(settings.concurrency)
        self.task_connections = TaskConnections(self.dsn, settings.concurrency)
        self.completer = Completer(
            connect=lambda: self._connect(options=COMPLETER_OPTIONS), queries=queries,
            on_recorded=self._recorded, flush_interval=settings.completion_flush_interval,
        )
        self.executor = Executor(
            tasks=queue.tasks, worker_id=self.id, queries=queries, threads=self.threads,
            report_progress=self._report_progress, connections=self.task_connections,
        )
        self.heartbeat = Heartbeat(
            connect=self._connect, queries=queries, lease=settings.lease,
            registration={
                "worker_id": self.id, "hostname": socket.gethostname(), "pid": os.getpid(),
                "queues": settings.queues, "concurrency": settings.concurrency,
            },
            running=lambda: list(self.executions.values()),
            on_lease_lost=self._lease_lost, on_cancel_requested=self._cancel_requested,
        )
        self.producer = Producer(
            connect=self._connect_for_claims, queries=queries, worker_id=self.id,
            queues=settings.queues,
            lease=settings.lease, poll_interval=settings.poll_interval,
            free_slots=lambda: settings.concurrency - len(self.executions),
            start=self._start, healthy=lambda: self.heartbeat.healthy,
        )
        self.listener = Listener(
            connect=self._connect, channel=notify_channel(queue.schema),
            queues=frozenset(settings.queues), wake=self.producer.wake,
        )
        self.maintenance = Maintenance(
            connect=self._connect, queries=queries, rescue_interval=settings.rescue_interval,
            prune_interval=settings.prune_interval,
        )

    async def _connect(self, **options: Any) -> psycopg.AsyncConnection[Any]:
        # Keepalives and tcp_user_timeout make a silently dead link (partition, host gone)
        # fail within ~10-20 s instead of the kernel's default of many minutes.
        return await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, application_name=f"pgqueue worker {self.id}"[:63],
            connect_timeout=10, keepalives=1, keepalives_idle=5, keepalives_interval=2,
            keepalives_count=3, tcp_user_timeout=10_000, **options,
        )

    async def _connect_for_claims(self) -> psycopg.AsyncConnection[Any]:
        """The claim connection commits asynchronously and plans without sorts.

        ``synchronous_commit = off``: a claim does not wait for its WAL flush (measured
        2.25 ms → 0.85 ms per claim). Losing a claim loses no job: if PostgreSQL crashes
        before the claim reaches disk, the row is ``queued`` again and runs again
        (at-least-once, as promised). What the run did is fenced off by the claim's random
        ``lease_token``: the lost claim's token is gone from the row, so none of its
        outcomes can be recorded, even if this same worker claims the job again at the
        same attempt number. Every outcome, and every ``ctx.transaction()``, commits
        synchronously, which also flushes the claim it follows.

        ``enable_sort = off``: the claim must walk ``jobs_claim_idx``, which is already in
        claim order, and stop after ``limit`` rows. When the statistics under-count the
        queued rows (a table not yet analysed, or analysed before a burst of enqueues),
        the planner otherwise may pick a bitmap scan (it picked ``jobs_run_at_idx``, the
        index revision 0003 replaced) and sort *every* ready job on each claim: 12.8 ms
        instead of 0.56 ms per claim with 20,000 queued, growing with the backlog. The
        other statements on this connection (the resumed claims, ``next_run_at``) need
        no sort either.

        Its jsonb values (each job's ``args``, ``kwargs`` and ``meta``) are decoded with
        :func:`pgqueue.serialization.loads` (orjson) instead of psycopg's default
        ``json.loads``; only this connection is changed, never the user's.
        """
        conn = await self._connect(options="-c synchronous_commit=off -c enable_sort=off")
        set_json_loads(loads, conn)
        return conn

    # -- executions ---------------------------------------------------------------------

    def _start(self, job: ClaimedJob) -> None:
        stale = self.executions.get(job.id)
        if stale is not None and stale.job.token != job.token:
            # We claimed a job we still run: our lease on the older claim was lost (the
            # rescuer requeued it, or the claim was lost in a PostgreSQL crash) before a
            # heartbeat told us. Stop that run now, or it would go on unseen: outside the
            # concurrency count and never released.
            self._lease_lost(stale)
        execution = self.executor.prepare(job)
        self.executions[job.id] = execution
        task = asyncio.create_task(self.executor.run(execution), name=f"pgqueue-job-{job.id}")
        execution.asyncio_task = task
        task.add_done_callback(lambda done: self._finished(execution, done))

    def _finished(self, execution: Execution, done: asyncio.Task[Outcome | None]) -> None:
        if self.executions.get(execution.job.id) is execution:
            del self.executions[execution.job.id]
        self.producer.slot_freed()
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            logger.error("Job %s: the executor failed unexpectedly.", execution.job.id,
                         exc_info=error)
            return
        outcome = done.result()
        if outcome is not None:
            self.completer.submit(outcome)

    def _report_progress(self, job: ClaimedJob, value: str) -> None:
        outcome = Outcome.of(job, "progress", progress=value)
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.completer.submit(outcome)
        else:  # called from a sync task's thread
            loop.call_soon_threadsafe(self.completer.submit, outcome)

    def _recorded(self, outcome: Outcome, recorded: bool) -> None:
        """Completer callback: a job retried or snoozed for less than the poll interval
        wakes the producer when it is due (no NOTIFY is sent for a future run_at)."""
        if recorded and outcome.kind in ("retry", "snooze") and \
                0 < outcome.delay < self.settings.poll_interval and self._loop is not None:
            self._loop.call_later(outcome.delay, self.producer.wake)

    def _lease_lost(self, execution: Execution) -> None:
        logger.warning("Job %s (%s): lease lost (the job was rescued or taken by another "
                       "worker); stopping this attempt.", execution.job.id, execution.job.task)
        execution.ctx.lease_lost = True
        execution.stop("lease_lost")

    def _cancel_requested(self, execution: Execution) -> None:
        if execution.cancel_reason is None:
            logger.info("Job %s (%s): cancellation requested.", execution.job.id,
                        execution.job.task)
            execution.stop("cancelled")

    def _is_idle(self) -> bool:
        return not self.executions and self.completer.idle

    # -- lifecycle ----------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM and the first SIGINT do)."""
        if not self._stop.is_set():
            logger.info("Shutting down: no new jobs; waiting up to %.0f s for %d running job(s).",
                        self.settings.shutdown_timeout, len(self.executions))
        self._stop.set()

    def _on_sigint(self) -> None:
        self._interrupts += 1
        if self._interrupts > 1:
            logger.warning("Second interrupt: exiting now; leases will recover running jobs.")
            logging.shutdown()
            os._exit(130)
        self.request_stop()

    async def _wait_for_database(self) -> None:
        deadline = time.monotonic() + self.settings.connect_timeout
        backoff = Backoff(base=0.5, cap=5.0)
        attempt = 0
        while True:
            attempt += 1
            try:
                conn = await self._connect()
                try:
                    await check_schema_async(conn, self.queue.schema)
                finally:
                    await conn.close()
                return
            except Exception as exc:
                if not is_retryable(exc):
                    raise
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DatabaseUnavailable(
                        f"could not connect to the database within "
                        f"{self.settings.connect_timeout:g}s: {message}"
                    ) from None
                delay = min(backoff.next_delay(), remaining)
                logger.warning("Cannot connect to the database (attempt %d: %s); retrying in "
                               "%.1f s.", attempt, message, delay)
                await asyncio.sleep(delay)

    async def run(self) -> int:
        """Run until stopped; returns the process exit status (0 for a clean stop)."""
        self._loop = asyncio.get_running_loop()
        await self._wait_for_database()
        await self.heartbeat.beat()  # registers the worker row before the first claim
        if self.settings.install_signal_handlers:
            self._loop.add_signal_handler(signal.SIGTERM, self.request_stop)
            self._loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        logger.info("Worker %s started: concurrency %d, queues %s.", self.id,
                    self.settings.concurrency, ",".join(self.settings.queues) or "(all)")
        services = {
            asyncio.create_task(self.completer.run(), name="pgqueue-completer"),
            asyncio.create_task(self.heartbeat.run(), name="pgqueue-heartbeat"),
            asyncio.create_task(self.listener.run(), name="pgqueue-listener"),
            asyncio.create_task(self.maintenance.run(), name="pgqueue-maintenance"),
        }
        producer = asyncio.create_task(
            self.producer.run(burst=self.settings.burst, is_idle=self._is_idle),
            name="pgqueue-producer",
        )
        stop = asyncio.create_task(self._stop.wait())
        try:
            done, _ = await asyncio.wait({producer, stop, *services},
                                         return_when=asyncio.FIRST_COMPLETED)
            for task in done - {stop}:
                if task is not producer or task.exception() is not None:
                    task.result()  # a service died: re-raise its error
        finally:
            await self._shutdown(producer, services, stop)
            if self.settings.install_signal_handlers:
                self._loop.remove_signal_handler(signal.SIGTERM)
                self._loop.remove_signal_handler(signal.SIGINT)
        return 0

    async def _shutdown(self, producer: asyncio.Task[None], services: set[asyncio.Task[None]],
                        stop: asyncio.Task[Any]) -> None:
        producer.cancel()
        stop.cancel()
        await asyncio.gather(producer, stop, return_exceptions=True)
        await self._drain()
        try:
            await asyncio.wait_for(self.completer.wait_idle(), FINAL_FLUSH_SECONDS)
        except TimeoutError:
            logger.error("Could not record every outcome before exiting; leases will "
                         "recover the jobs concerned.")
        for task in services:
            task.cancel()
        await asyncio.gather(*services, return_exceptions=True)
        await self.producer.close()
        await self.task_connections.close()
        self.threads.shutdown()
        await self._deregister()
        logger.info("Worker %s stopped.", self.id)

    async def _drain(self) -> None:
        """Let running jobs finish within shutdown_timeout, then release the rest."""
        running = [e.asyncio_task for e in self.executions.values() if e.asyncio_task]
        if running:
            _, pending = await asyncio.wait(running, timeout=self.settings.shutdown_timeout)
            if pending:
                logger.warning("Shutdown timeout: releasing %d unfinished job(s) back to the "
                               "queue.", len(pending))
                for execution in list(self.executions.values()):
                    execution.stop("shutdown")
                _, stuck = await asyncio.wait(pending, timeout=5.0)
                for execution in list(self.executions.values()):
                    # Async code that swallowed its cancellation: release it anyway.
                    if execution.asyncio_task in stuck:
                        job = execution.job
                        self.completer.submit(Outcome.of(job, "release"))

    async def _deregister(self) -> None:
        try:
            conn = await asyncio.wait_for(self._connect(), 5.0)
            try:
                await conn.execute(self.queue.queries["delete_worker"], {"worker_id": self.id})
            finally:
                await conn.close()
        except Exception as exc:
            logger.warning("Could not remove this worker's row (%s); it expires on its own.",
                           str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))

    _loop: asyncio.AbstractEventLoop | None = None


def run(queue: Queue, settings: WorkerSettings) -> int:
    """Run a worker for ``queue`` until stopped (blocking)."""
    return asyncio.run(Worker(queue, settings).run())
