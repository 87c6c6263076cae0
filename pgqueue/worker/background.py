"""A worker in a thread of this process: for a demo, a notebook, a test suite.

The thread runs its own event loop, so the caller's thread stays free (it may have an
event loop of its own, or a display to update). Stopping is the graceful shutdown a
SIGTERM starts: no new claims, running jobs finish or are released, every outcome is
written. Signal handlers are never installed: they belong to the main thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType
from typing import TYPE_CHECKING

from pgqueue.worker.settings import WorkerSettings
from pgqueue.worker.worker import Worker

if TYPE_CHECKING:
    from pgqueue.queue import Queue


class BackgroundWorker:
    """A :class:`Worker` for ``queue`` running in a daemon thread.

    ::

        with BackgroundWorker(queue, WorkerSettings(concurrency=4)) as worker:
            ...  # jobs enqueued here run in the background
        # leaving the block stopped the worker gracefully and waited for it

    or ``start()``, then ``stop()`` and ``join()``. An error that ended the worker (an
    unreachable database, an out-of-date schema) is kept in :attr:`error`; ``start()``
    and leaving the ``with`` block raise it.
    """

    def __init__(self, queue: Queue, settings: WorkerSettings | None = None) -> None:
        settings = settings if settings is not None else WorkerSettings()
        self.worker = Worker(queue, settings.model_copy(update={"install_signal_handlers": False}))
        self.loop = asyncio.new_event_loop()
        self.status: int | None = None  # the worker's exit status once it has finished
        self.error: BaseException | None = None
        self._ready = threading.Event()
        # Set when the thread is done. join() waits on it rather than on Thread.join():
        # a Thread.join() interrupted by KeyboardInterrupt can make the next one return at
        # once in CPython 3.11 while the thread still runs (pgq demo's Ctrl-C then went
        # on while the worker was still releasing its jobs).
        self._finished = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pgqueue-worker", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.status = self.loop.run_until_complete(self._work())
        except BaseException as exc:  # handed to the caller's thread, which re-raises it
            self.error = exc
        finally:
            self._ready.set()  # nobody waits for a readiness that will never come
            try:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
                self.loop.close()
            finally:
                self._finished.set()

    async def _work(self) -> int:
        run = asyncio.create_task(self.worker.run())
        ready = asyncio.create_task(self.worker.ready.wait())
        await asyncio.wait({run, ready}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if not run.done():
            self._ready.set()  # else _run sets it, once self.error holds what ended the run
        return await run

    def start(self, timeout: float | None = 30.0) -> None:
        """Start the thread; return once the worker is registered and listening (or
        after ``timeout`` seconds; None waits as long as it takes).

        Raises the worker's error if it could not start.
        """
        self.thread.start()
        if timeout is None or timeout > 0:
            self._ready.wait(timeout)
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """Ask for a graceful shutdown, as on SIGTERM; returns at once (see :meth:`join`).

        Harmless once the worker has finished.
        """
        # A RuntimeError means the loop already closed: nothing left to stop.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.worker.request_stop)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the worker to finish (at most ``timeout`` seconds)."""
        if self._finished.wait(timeout):
            self.thread.join(timeout)  # only its last instructions are left

    @property
    def running(self) -> bool:
        """True until the worker has finished (stopped, or failed: see :attr:`error`)."""
        return self.thread.is_alive() and not self._finished.is_set()

    def __enter__(self) -> BackgroundWorker:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self.join()
        if self.error is not None and exc is None:
            raise self.error

