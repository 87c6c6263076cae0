"""``pgq worker --processes N``: N worker processes under one supervisor.

One worker process runs async tasks on one event loop and sync tasks in threads that
share one GIL, so CPU-bound Python tasks get one core however high ``--concurrency`` is.
The supervisor starts N complete worker processes instead, each with its own event loop,
thread pool, connections, ``workers`` row and ``--concurrency`` slots.

* **Fresh interpreters.** Each child is ``python -m pgqueue.cli worker`` with the
  supervisor's own options minus ``--processes`` (``cli/worker.py`` builds the command),
  started by ``subprocess`` (fork + exec at once): never a fork of a process that holds
  threads, connections or a loop. A child is a plain ``pgq worker`` in every respect.
* **Its worker id is known.** The supervisor draws each child's id suffix
  (``WorkerSettings.id_suffix``); with the child's pid and this host's name that is the
  child's ``workers.id``. When a child dies, the supervisor ends the leases of the jobs
  that id still holds (``queries.expire_worker_leases``, fenced on the worker id and
  ``status = 'running'``) and runs the rescue at once (``Maintenance.rescue``): the jobs
  go back to the queue within a moment instead of after the lease, an attempt counted as
  for any lease expiry (a job that kills its process must not be retried forever). Its
  ``workers`` row is removed. If the database cannot be reached then, the leases expire
  and any worker's rescuer takes them, as for a worker on a lost host.
* **Restarts.** A child that exits while the supervisor is not stopping is started
  again after a capped, jittered exponential backoff (``RESTART_BASE`` doubling up to
  ``RESTART_CAP``; a child that ran ``STABLE_AFTER`` seconds resets it), each logged.
  With ``--burst`` a child that exits 0 has drained what was ready and is not restarted.
* **Signals.** SIGTERM, and the first SIGINT, reach every child as SIGTERM: each drains
  as a single worker does (``--shutdown-timeout``), and the supervisor exits 0 once all
  have exited 0. Children share the supervisor's process group, so a Ctrl-C in a
  terminal also reaches them directly: forwarding SIGINT as SIGINT would count twice and
  stop them at once. A second SIGINT kills every child (SIGKILL) and exits 130 at once;
  their leases recover their jobs, as after a single worker's second SIGINT. On Linux
  each child also gets SIGTERM if the supervisor itself dies (``PR_SET_PDEATHSIG``).
* **Start-up.** The supervisor checks the database and schema once, with the same
  retries as a worker (``--connect-timeout``), before starting any child: a wrong DSN or
  an unmigrated schema fails once, in one line, instead of in a restart loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pgqueue.db.migrate import check_schema_async
from pgqueue.errors import first_line
from pgqueue.worker.backoff import Backoff
from pgqueue.worker.connections import WorkerConnections
from pgqueue.worker.maintenance import Maintenance
from pgqueue.worker.service import retrying_for

if TYPE_CHECKING:
    from pgqueue.queue import Queue

logger = logging.getLogger("pgqueue.supervisor")

# Restart backoff: 1 s, 2 s, 4 s ... up to 30 s (jittered), for a child that keeps dying;
# a child that stayed up a minute starts the count again.
RESTART_BASE = 1.0
RESTART_CAP = 30.0
STABLE_AFTER = 60.0
# How often the supervisor looks for children that exited (a poll, not SIGCHLD: no
# handler races with subprocess's own reaping, and a tenth of a second is soon enough to
# restart a process).
POLL = 0.1
# After SIGTERM, how long beyond --shutdown-timeout a child may take to exit before it
# is killed (its own bounds on releasing jobs and writing outcomes come to seconds).
STOP_GRACE = 30.0

# The command of child ``slot`` whose worker id ends in ``suffix``.
Command = Callable[[int, str], Sequence[str]]


def default_processes() -> int:
    """``--processes auto``: the CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def exit_description(status: int) -> str:
    """``exited with status 1`` / ``was killed by SIGKILL``."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"was killed by {name}"
    return f"exited with status {status}"


@dataclass
class Child:
    """One worker process of the supervisor."""

    slot: int
    suffix: str
    popen: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def worker_id(self) -> str:
        """Its ``workers.id``, as ``Worker`` makes it (``hostname:pid:suffix``)."""
        return f"{socket.gethostname()}:{self.pid}:{self.suffix}"


class Supervisor:
    """Runs ``processes`` children made by ``command`` until stopped; see the module."""

    def __init__(self, queue: Queue, processes: int, command: Command, *, burst: bool,
                 connect_timeout: float, shutdown_timeout: float) -> None:
        self.queue = queue
        self.processes = processes
        self.command = command
        self.burst = burst
        self.connect_timeout = connect_timeout
        self.shutdown_timeout = shutdown_timeout
        self.children: dict[int, Child] = {}
        self._stop = asyncio.Event()
        self._stop_deadline = float("inf")
        self._interrupts = 0
        self.connections = WorkerConnections(
            queue.dsn, f"supervisor {socket.gethostname()}:{os.getpid()}",
            pooled=queue.pool_mode == "transaction",
        )

    # -- lifecycle ----------------------------------------------------------------------

    async def run(self) -> int:
        """Start the children and keep them running until stopped (or, with ``burst``,
        until every child drained and exited 0); returns the exit status."""
        loop = asyncio.get_running_loop()
        await self._wait_for_database()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        logger.info("Starting %d worker processes.", self.processes)
        try:
            statuses = await asyncio.gather(*(self._keep(slot)
                                              for slot in range(self.processes)))
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
            loop.remove_signal_handler(signal.SIGINT)
        failed = [status for status in statuses if status != 0]
        if failed:
            logger.error("Worker processes ended with errors: %s.",
                         ", ".join(exit_description(status) for status in failed))
            return 1
        logger.info("All %d worker processes stopped.", self.processes)
        return 0

    def request_stop(self) -> None:
        """A graceful stop: every child drains (what SIGTERM and the first SIGINT do)."""
        if self._stop.is_set():
            return
        logger.info("Stopping: %d worker process(es) drain their running jobs.",
                    len(self.children))
        self._stop.set()
        self._stop_deadline = time.monotonic() + self.shutdown_timeout + STOP_GRACE
        for child in self.children.values():
            _send(child, signal.SIGTERM)

    def _on_sigint(self) -> None:
        self._interrupts += 1
        if self._interrupts == 1:
            self.request_stop()
            return
        logger.warning("Second interrupt: killing the worker processes and exiting now; "
                       "leases will recover their running jobs.")
        for child in self.children.values():
            _send(child, signal.SIGKILL)
        logging.shutdown()
        os._exit(130)

    async def _wait_for_database(self) -> None:
        """Connect and check the schema, retrying for ``connect_timeout`` (as a worker
        does before it registers)."""

        async def check() -> None:
            conn = await self.connections.connect()
            try:
                await check_schema_async(conn, self.queue.schema)
            finally:
                await conn.close()

        await retrying_for(check, timeout=self.connect_timeout)

    # -- children -----------------------------------------------------------------------

    async def _keep(self, slot: int) -> int:
        """Run child ``slot``, restarting it when it dies; its last exit status."""
        backoff = Backoff(base=RESTART_BASE, cap=RESTART_CAP)
        while True:
            child = self._spawn(slot)
            status = await self._exited(child)
            del self.children[slot]
            lived = time.monotonic() - child.started
            if self._stop.is_set() and status == -signal.SIGTERM:
                # Our SIGTERM arrived before the child installed its handlers, i.e.
                # before its first claim: it held nothing and stopped as asked.
                status = 0
            what = f"Worker process {slot} (pid {child.pid}) {exit_description(status)} " \
                   f"after {lived:.1f} s"
            if status != 0:
                released = await self._release(child)
                if released is not None:
                    what += f"; {released} job(s) it held went back to the queue at once " \
                            "(the attempt counts, as after a lease expiry)"
            if self._stop.is_set() or (self.burst and status == 0):
                if status != 0:
                    logger.warning("%s.", what)
                return status
            if lived >= STABLE_AFTER:
                backoff.reset()
            delay = backoff.next_delay()
            logger.warning("%s; restarting it in %.1f s.", what, delay)
            try:
                await asyncio.wait_for(self._stop.wait(), delay)
            except TimeoutError:
                continue
            # Stopped while waiting to restart: this slot has nothing left to drain, and
            # its crash was logged and its jobs released.
            return 0

    def _spawn(self, slot: int) -> Child:
        suffix = secrets.token_hex(4)
        command = list(self.command(slot, suffix))
        popen = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                 preexec_fn=_die_with_parent(os.getpid()))
        child = Child(slot, suffix, popen)
        self.children[slot] = child
        logger.info("Started worker process %d (pid %d).", slot, child.pid)
        return child

    async def _exited(self, child: Child) -> int:
        """Wait for ``child`` to exit; kill it if a stop outlasts its bound."""
        while (status := child.popen.poll()) is None:
            if time.monotonic() > self._stop_deadline:
                logger.error("Worker process %d (pid %d) did not stop within %.0f s of "
                             "SIGTERM; killing it.", child.slot, child.pid,
                             self.shutdown_timeout + STOP_GRACE)
                _send(child, signal.SIGKILL)
            await asyncio.sleep(POLL)
        return status

    async def _release(self, child: Child) -> int | None:
        """The child is gone: its jobs back to the queue now, its ``workers`` row removed.
        Returns how many jobs it held, or None if the database could not be reached (the
        leases then expire and any worker's rescuer takes the jobs)."""
        queries = self.queue.queries
        try:
            conn = await self.connections.connect()
            try:
                ended = await conn.execute(queries.expire_worker_leases,
                                           {"worker_id": child.worker_id})
                rescuer = Maintenance(connect=self.connections.link(), queries=queries)
                try:
                    await rescuer.rescue()
                finally:
                    await rescuer.close()
                await conn.execute(queries.delete_worker, {"worker_id": child.worker_id})
            finally:
                await conn.close()
        except Exception as exc:
            logger.error("Could not release the jobs of worker process %d (pid %d, worker "
                         "%s): %s; their leases will expire and any worker will rescue "
                         "them.", child.slot, child.pid, child.worker_id, first_line(exc))
            return None
        return ended.rowcount


def _send(child: Child, sig: signal.Signals) -> None:
    # It may have just exited (_exited will see it).
    with contextlib.suppress(ProcessLookupError):
        child.popen.send_signal(sig)


# prctl(2), looked up once here rather than in the forked child before exec.
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) \
    if sys.platform == "linux" else None


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM (a graceful drain) when the
    supervisor dies, even by SIGKILL, on Linux; None elsewhere."""
    if _LIBC is None:
        return None
    prctl = _LIBC.prctl

    def arrange() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os._exit(1)

    return arrange


def supervise(queue: Queue, processes: int, command: Command, *, burst: bool,
              connect_timeout: float, shutdown_timeout: float) -> int:
    """Run a :class:`Supervisor` to the end (blocking); returns the exit status."""
    supervisor = Supervisor(queue, processes, command, burst=burst,
                            connect_timeout=connect_timeout,
                            shutdown_timeout=shutdown_timeout)
    return asyncio.run(supervisor.run())
