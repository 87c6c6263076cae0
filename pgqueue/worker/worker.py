"""The worker: starts its services, handles signals, shuts down cleanly.

Services (``worker/service.py``; each in its own module, each with its own connection
from ``worker/connections.py``): producer (claims) → executor (runs; no SQL) → completer
(writes outcomes, fenced); heartbeat (leases, worker row); listener (NOTIFY wake-ups);
maintenance (rescuer, pruner); scheduler (periodic jobs' ticks).

Shutdown (SIGTERM or SIGINT): stop claiming; let running jobs finish for up to
``shutdown_timeout``; then stop the rest and release them to ``queued`` at once with the
attempt given back; write every outcome; remove the worker row; exit 0. A second SIGINT
exits at once and leaves the rest to lease expiry. The bounds on each step are in
``worker/timings.py``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from pgqueue import tracing
from pgqueue.db.migrate import check_schema_async
from pgqueue.db.names import notify_channel
from pgqueue.db.plans import run_async
from pgqueue.errors import ConfigurationError, first_line
from pgqueue.limits import declare_task_limits
from pgqueue.worker import timings
from pgqueue.worker.completer import Completer
from pgqueue.worker.connections import CLAIMS, COMPLETIONS, TaskConnections, WorkerConnections
from pgqueue.worker.counts import OutcomeCounts
from pgqueue.worker.executor import Execution, Executor
from pgqueue.worker.heartbeat import Heartbeat
from pgqueue.worker.ledger import Ledger
from pgqueue.worker.listener import Listener
from pgqueue.worker.maintenance import Maintenance
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.prefetch import PATIENCE, Prefetch
from pgqueue.worker.producer import Producer
from pgqueue.worker.scheduler import Scheduler
from pgqueue.worker.service import Service, retrying_for
from pgqueue.worker.settings import WorkerSettings
from pgqueue.worker.threads import DaemonThreadPool

if TYPE_CHECKING:
    from pgqueue.db.queries import ClaimedJob
    from pgqueue.metrics import WorkerMetrics
    from pgqueue.metrics_server import MetricsServer
    from pgqueue.queue import Queue

logger = logging.getLogger("pgqueue.worker")


class Worker:
    """One worker: its services and its lifecycle, in the running event loop.

    ``await worker.run()`` runs until :meth:`request_stop` (or SIGTERM/SIGINT when
    ``install_signal_handlers``) and returns the exit status, 0 for a clean stop.
    ``Queue.run_worker()`` does that in a new event loop; :class:`BackgroundWorker` in a
    thread.
    """

    def __init__(self, queue: Queue, settings: WorkerSettings) -> None:
        self.queue = queue
        self.settings = settings
        self.dsn = queue.dsn
        suffix = settings.id_suffix or secrets.token_hex(3)
        self.id = f"{socket.gethostname()}:{os.getpid()}:{suffix}"
        # How many jobs beyond the slots it may hold: --prefetch K, or measured.
        self.prefetch = Prefetch(settings.prefetch, concurrency=settings.concurrency)
        self._draining = False
        self._stop = asyncio.Event()
        self._interrupts = 0
        queries = queue.queries
        pooled = queue.pool_mode == "transaction"
        if pooled and settings.listen and settings.listen_dsn is None:
            raise ConfigurationError(
                "a worker behind a pooler in transaction mode (pool_mode=transaction) "
                "cannot LISTEN through it: give --listen-dsn with a direct DSN "
                "(listen_dsn=...), or --no-listen (listen=False) to poll every "
                "--poll-interval"
            )
        self.connections = WorkerConnections(self.dsn, self.id, pooled=pooled,
                                             listen_dsn=settings.listen_dsn)
        self.threads = DaemonThreadPool(settings.concurrency, on_unstuck=self._unstuck)
        # The slots and every job this worker holds: held (claimed ahead), executing,
        # ended with its outcome unwritten (worker/ledger.py).
        self.ledger = Ledger(
            concurrency=settings.concurrency, prefetch=self.prefetch,
            queue_slots=settings.queue_slots,
            queue_rank={queue: n for n, queue in enumerate(settings.queues)},
            stuck=lambda: self.threads.stuck,
        )
        self.executions = self.ledger.executions
        self.task_connections = TaskConnections(self.dsn, settings.concurrency, pooled=pooled)
        self.completer = Completer(
            connect=self.connections.link(COMPLETIONS), queries=queries, ledger=self.ledger,
            on_recorded=self._recorded, on_started=self._start,
            start_params={"worker_id": self.id, "lease": settings.lease,
                          "queues": settings.queues},
            flush_interval=settings.completion_flush_interval,
        )
        self.executor = Executor(
            tasks=queue.tasks, worker_id=self.id, queries=queries, threads=self.threads,
            report_progress=self._report_progress, connections=self.task_connections,
            log_succeeded=settings.log_succeeded,
        )
        # Outcomes by minute for job_counts, written by the heartbeat (worker/counts.py).
        self.counts = OutcomeCounts()
        self.heartbeat = Heartbeat(
            connect=self.connections.link(), queries=queries, lease=settings.lease,
            registration={
                "worker_id": self.id, "hostname": socket.gethostname(), "pid": os.getpid(),
                "queues": settings.queues, "concurrency": settings.concurrency,
            },
            ledger=self.ledger, holdings=self.completer.holdings,
            on_lease_lost=self._lease_lost, on_cancel_requested=self._cancel_requested,
            stuck=lambda: self.threads.stuck, counts=self.counts,
        )
        self.producer = Producer(
            connect=self.connections.link(CLAIMS), queries=queries, worker_id=self.id,
            queues=settings.queues, tasks=frozenset(queue.tasks),
            lease=settings.lease, poll_interval=settings.poll_interval, ledger=self.ledger,
            start=self._start, healthy=lambda: self.heartbeat.healthy,
            burst=settings.burst, is_idle=self._is_idle, starved=self.completer.hurry,
            stalled=self._release_stale_prefetch,
        )
        self.ledger.on_start_demand = self.completer.start_demand
        self.ledger.on_claim_demand = self.producer.slot_freed
        self.maintenance = Maintenance(
            connect=self.connections.link(), queries=queries,
            rescue_interval=settings.rescue_interval, prune_interval=settings.prune_interval,
        )
        # Periodic ticks; none in a burst worker, which only drains what is ready. It
        # borrows the maintenance connection (a few statements per tick do not deserve a
        # connection of their own); without a listener it reads the schedules every poll
        # interval.
        self.scheduler = None if settings.burst else Scheduler(
            connect=self.maintenance.connection, queries=queries,
            specs=list(queue.periodic_tasks.values()), lease=settings.lease,
            recheck=timings.SCHEDULE_RECHECK if settings.listen else settings.poll_interval,
        )
        # None with listen=False: the producer polls (and the worker is ready once
        # registered).
        self.listener = Listener(
            connect=self.connections.listen_link(), channel=notify_channel(queue.schema),
            queues=frozenset(settings.queues), wake=self.producer.wake,
            limits_changed=self.producer.limits_changed,
            schedules_changed=self.scheduler.wake if self.scheduler else lambda: None,
        ) if settings.listen else None
        self._registered = asyncio.Event()
        # --metrics-port: metrics fed by the hooks below and an HTTP endpoint; None
        # otherwise, and the hooks cost one comparison each.
        self.metrics: WorkerMetrics | None = None
        self.metrics_server: MetricsServer | None = None
        if settings.metrics_port is not None:
            self.metrics, self.metrics_server = self._metrics_endpoint()
        # Started in this order and stopped in the reverse; the producer, which gives the
        # others work, starts last and stops first.
        self.services: list[Service] = [
            service for service in (self.completer, self.heartbeat, self.listener,
                                    self.maintenance, self.scheduler, self.producer)
            if service is not None
        ]

    def _metrics_endpoint(self) -> tuple[WorkerMetrics, MetricsServer]:
        try:
            from pgqueue.metrics import WorkerMetrics
            from pgqueue.metrics_server import MetricsServer
        except ImportError as exc:
            raise ConfigurationError(
                f"--metrics-port (metrics_port) needs prometheus-client ({exc}): "
                "pip install 'pgqueue[metrics]'") from None
        metrics = WorkerMetrics(
            running=lambda: self.ledger.executing,
            prefetched=lambda: self.ledger.held,
            heartbeat_age=lambda: time.monotonic() - self.heartbeat.last_success,
            stuck=lambda: self.threads.stuck, concurrency=self.settings.concurrency,
        )
        assert self.settings.metrics_port is not None
        server = MetricsServer(host=self.settings.metrics_host, port=self.settings.metrics_port,
                               registry=metrics.registry, health=self.health)
        return metrics, server

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy (``GET /healthz`` answers 200) while the worker is registered, its
        heartbeats succeed (it can reach the database and keep its leases) and it is not
        shutting down; the body says what is wrong otherwise (503)."""
        age = time.monotonic() - self.heartbeat.last_success
        problems = []
        if not self._registered.is_set():
            problems.append("starting: not connected to the database and registered yet")
        elif not self.heartbeat.healthy:
            problems.append(f"heartbeats have failed for {age:.0f} s: the database is "
                            "unreachable or too slow")
        if self._stop.is_set():
            problems.append("draining: shutting down, claiming no new jobs")
        return not problems, {
            "status": "unavailable" if problems else "ok",
            "problems": problems,
            "worker_id": self.id,
            "heartbeat_age_seconds": round(age, 3),
            "running": self.ledger.executing,
            "draining": self._stop.is_set(),
        }

    @property
    def ready(self) -> asyncio.Event:
        """Set once the worker is registered and listening for wake-ups (cleared while
        its listen connection is being re-established); without a listener, once it is
        registered."""
        return self.listener.listening if self.listener is not None else self._registered

    @property
    def sleeping(self) -> asyncio.Event:
        """Set while the worker has nothing to claim and waits for a wake-up: a NOTIFY,
        the next scheduled job, or the poll interval."""
        return self.producer.sleeping

    # -- executions ---------------------------------------------------------------------

    def _start(self, job: ClaimedJob) -> None:
        """Run a job a claim or the completer just started (``running`` in SQL, its slot
        reserved in the ledger)."""
        stale = self.executions.get(job.id)
        if stale is not None and stale.job.token != job.token:
            # We started a job we still hold: our lease on the older claim was lost (the
            # rescuer requeued it, or the claim was lost in a PostgreSQL crash) before a
            # heartbeat told us. Stop that run now, or it would go on unseen: outside the
            # concurrency count and never released.
            self._lease_lost(stale)
        if self.metrics is not None:
            self.metrics.claimed(job)
        execution = self.executor.prepare(job)
        execution.started = time.monotonic()
        self.ledger.began(execution)
        attempt = self._traced(execution) if tracing.ENABLED and tracing.active() \
            else self.executor.run(execution)
        task = asyncio.create_task(attempt, name=f"pgqueue-job-{execution.job.id}")
        execution.asyncio_task = task
        task.add_done_callback(functools.partial(self._finished, execution))

    async def _traced(self, execution: Execution) -> Outcome | None:
        """The attempt in its OpenTelemetry span (``pgqueue/tracing.py``)."""
        with tracing.attempt_span(execution.job) as span:
            outcome = await self.executor.run(execution)
            tracing.record_outcome(span, outcome)
            return outcome

    def _unstuck(self) -> None:
        """A stuck thread returned: its slot is free again."""
        logger.info("A stuck task thread returned; %d still stuck.", self.threads.stuck)
        self.ledger.slot_freed()

    def _finished(self, execution: Execution, done: asyncio.Task[Outcome | None]) -> None:
        self.prefetch.ended(time.monotonic() - execution.started)
        outcome: Outcome | None = None
        if not done.cancelled():
            error = done.exception()
            if error is not None:
                logger.error("Job %s: the executor failed unexpectedly.", execution.job.id,
                             exc_info=error)
            else:
                outcome = done.result()
        # Its slot stays taken until the outcome is committed (none: free now).
        self.ledger.finished(execution, outcome)
        if outcome is None:
            return
        if self.metrics is not None:
            self.metrics.ended(execution, outcome)
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
        """Completer callback: a final outcome frees its job's place (see _free_slots); a
        job retried or snoozed for less than the poll interval wakes the producer when it
        is due (no NOTIFY is sent for a future run_at)."""
        if self.metrics is not None:
            self.metrics.recorded(outcome, recorded)
        self.ledger.recorded(outcome)
        if outcome.holds_slot and recorded:
            self.counts.add(outcome.queue, outcome.task, outcome.kind)
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
        return not self.executions and not self.ledger.held and self.completer.idle

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
        """Connect, check the schema and register (the first heartbeat, which inserts the
        worker's row before the first claim), retrying for ``connect_timeout``."""

        async def check() -> None:
            conn = await self.connections.connect()
            try:
                await check_schema_async(conn, self.queue.schema)
                # The limits of this worker's tasks, for every worker's claims to see.
                await run_async(conn, declare_task_limits(self.queue.queries, {
                    name: task.limits for name, task in self.queue.tasks.items()}))
            finally:
                await conn.close()
            await self.heartbeat.beat()

        await retrying_for(check, timeout=self.settings.connect_timeout)

    async def run(self) -> int:
        """Run until stopped; returns the process exit status (0 for a clean stop)."""
        self._loop = asyncio.get_running_loop()
        if self.metrics_server is None:
            return await self._run()
        # Up first, down last: /healthz says "starting" while the database is out of
        # reach at start-up and "draining" during the shutdown.
        await self.metrics_server.start()
        try:
            return await self._run()
        finally:
            await self.metrics_server.stop()

    async def _run(self) -> int:
        assert self._loop is not None
        await self._wait_for_database()
        self._registered.set()
        self._handles_signals = self.settings.install_signal_handlers
        if self._handles_signals and threading.current_thread() is not threading.main_thread():
            # Signal handlers can only be installed in the main thread.
            logger.info("Not in the main thread: no SIGTERM/SIGINT handlers; stop this "
                        "worker with Worker.request_stop() or BackgroundWorker.stop() "
                        "(install_signal_handlers=False says so explicitly).")
            self._handles_signals = False
        if self._handles_signals:
            self._loop.add_signal_handler(signal.SIGTERM, self.request_stop)
            self._loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        slots = self.settings.queue_slots
        logger.info("Worker %s started: concurrency %d, queues %s.", self.id,
                    self.settings.concurrency,
                    ",".join(f"{q}:{slots[q]}" if q in slots else q
                             for q in self.settings.queues) or "(all)")
        if self.listener is None:
            logger.warning(
                "Not listening for notifications (--no-listen): a job starts up to the "
                "poll interval (%gs) after it becomes ready, half of that on average; "
                "lower --poll-interval for less (one claim query per worker per poll), or "
                "give --listen-dsn.", self.settings.poll_interval)
        tasks = {service.start(): service for service in self.services}
        stop = asyncio.create_task(self._stop.wait())
        try:
            done, _ = await asyncio.wait({stop, *tasks}, return_when=asyncio.FIRST_COMPLETED)
            for task in done - {stop}:
                # A service ended: a burst worker's producer found nothing more to do, or
                # a service died, whose error this re-raises.
                task.result()
        finally:
            stop.cancel()
            await self._shutdown()
            if self._handles_signals:
                self._loop.remove_signal_handler(signal.SIGTERM)
                self._loop.remove_signal_handler(signal.SIGINT)
        return 0

    async def _shutdown(self) -> None:
        await self.producer.stop()  # claim nothing more
        self._release_held()
        await self._drain()
        try:
            await asyncio.wait_for(self.completer.wait_idle(), timings.FINAL_FLUSH)
        except TimeoutError:
            logger.error("Could not record every outcome before exiting; leases will "
                         "recover the jobs concerned.")
        for service in reversed(self.services):
            await service.stop()
        await self.task_connections.close()
        self.threads.shutdown()
        await self._deregister()
        logger.info("Worker %s stopped.", self.id)

    def _release_stale_prefetch(self) -> None:
        """Held jobs that waited ``PATIENCE`` for a slot go back to the queue (they never
        started), for a worker with a free slot to take; the allowance shrinks to what the
        slow jobs holding the slots call for."""
        if not self.prefetch.auto:
            return  # --prefetch K: the user chose to hold K, whatever they wait for
        stale = self.ledger.stale_held(PATIENCE)
        if not stale:
            return
        now = time.monotonic()
        running = [now - e.started for e in self.executions.values()]
        self.prefetch.stalled(min(running, default=PATIENCE))
        logger.info("%d held job(s) waited %.0f s for a slot: back to the queue for another "
                    "worker.", len(stale), PATIENCE)
        for job in self.ledger.drop_held({job.id for job in stale}):
            self.completer.submit(Outcome.of(job, "unclaim"))

    def _release_held(self) -> None:
        """Held jobs go back to the queue at once, as they were claimed; nothing more
        starts."""
        self.ledger.draining = True
        for job in self.ledger.take_all_held():
            self.completer.submit(Outcome.of(job, "unclaim"))

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
                _, stuck = await asyncio.wait(pending, timeout=timings.RELEASE_WAIT)
                for execution in list(self.executions.values()):
                    # Async code that swallowed its cancellation: release it anyway.
                    if execution.asyncio_task in stuck:
                        outcome = Outcome.of(execution.job, "release")
                        self.ledger.finished(execution, outcome)
                        self.completer.submit(outcome)

    async def _deregister(self) -> None:
        try:
            conn = await asyncio.wait_for(self.connections.connect(), timings.DEREGISTER_TIMEOUT)
            try:
                # The last outcomes' counts, then the row (the counts stay).
                await self.counts.write(conn, self.queue.queries, self.id)
                await conn.execute(self.queue.queries.delete_worker, {"worker_id": self.id})
            finally:
                await conn.close()
        except Exception as exc:
            logger.warning("Could not remove this worker's row (%s); it expires on its own.",
                           first_line(exc))

    _loop: asyncio.AbstractEventLoop | None = None
    _handles_signals = False


def run(queue: Queue, settings: WorkerSettings) -> int:
    """Run a worker for ``queue`` until stopped (blocking).

    Not ``asyncio.run``: at the end it cancels the tasks left and waits for them without a
    bound, and a task that swallows its cancellation would keep the process alive forever.
    Leftover tasks get ``LEFTOVER_GRACE`` and are then abandoned: the jobs they ran were
    already released.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(Worker(queue, settings).run())
    finally:
        try:
            _abandon_leftovers(loop)
        finally:
            loop.close()


def _abandon_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in leftovers:
        task.cancel()
    if leftovers:
        loop.run_until_complete(asyncio.wait(leftovers, timeout=timings.LEFTOVER_GRACE))
        stuck = [task for task in leftovers if not task.done()]
        if stuck:
            logger.warning("Abandoning %d task(s) that ignored cancellation: %s.", len(stuck),
                           ", ".join(sorted(task.get_name() for task in stuck)))
            for task in stuck:
                # Closing the loop under a pending task makes asyncio log "Task was
                # destroyed but it is pending" at exit; say it once, above, instead.
                task._log_destroy_pending = False  # type: ignore[attr-defined]
    loop.run_until_complete(loop.shutdown_asyncgens())
