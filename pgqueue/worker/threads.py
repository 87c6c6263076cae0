"""A fixed pool of daemon threads for synchronous tasks.

Not ``concurrent.futures.ThreadPoolExecutor``: its threads are joined at interpreter exit,
so one sync task stuck past its timeout or past the shutdown deadline would keep a
stopping worker alive forever. Daemon threads let the process exit once every job it held
has been released; the stuck call's late result is then fenced out by the database.

A thread cannot be stopped. When the worker stops waiting for a call (its job timed out,
was released at shutdown or lost its lease) while the call still runs, the call is
*abandoned*: its thread stays busy, and :attr:`DaemonThreadPool.stuck` counts it until
the call returns, so that the worker keeps that slot taken instead of handing it to a job
that would wait for a thread.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_STOP = object()


class _Call:
    """One submitted callable and where its result goes."""

    __slots__ = ("abandoned", "func", "future", "loop", "started")

    def __init__(self, func: Callable[[], Any], future: asyncio.Future[Any],
                 loop: asyncio.AbstractEventLoop) -> None:
        self.func = func
        self.future = future
        self.loop = loop
        self.abandoned = False
        self.started = False


class DaemonThreadPool:
    """Runs callables on ``size`` daemon threads; results come back as asyncio futures."""

    def __init__(self, size: int, name: str = "pgqueue-task",
                 on_unstuck: Callable[[], None] = lambda: None) -> None:
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True)
            for n in range(size)
        ]
        self._started = False
        self._lock = threading.Lock()
        self._running: dict[asyncio.Future[Any], _Call] = {}
        self._stuck = 0
        # Called on the loop's thread when an abandoned call returns (its slot is free).
        self._on_unstuck = on_unstuck

    @property
    def stuck(self) -> int:
        """Threads still running a call nobody waits for any more."""
        return self._stuck

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is _STOP:
                return
            call: _Call = item
            with self._lock:
                if call.future.cancelled():  # abandoned before it started: skip it
                    self._running.pop(call.future, None)
                    continue
                call.started = True
            try:
                result, error = call.func(), None
            except BaseException as exc:
                result, error = None, exc
            with self._lock:
                self._running.pop(call.future, None)
                if call.abandoned:
                    self._stuck -= 1
            try:
                call.loop.call_soon_threadsafe(_settle, call.future, result, error)
                if call.abandoned:
                    call.loop.call_soon_threadsafe(self._on_unstuck)
            except RuntimeError:
                pass  # the loop is closed: the worker has exited, nobody waits for this

    def submit(self, func: Callable[[], T]) -> asyncio.Future[T]:
        """Schedule ``func`` on a pool thread; await the returned future for its result."""
        if not self._started:
            for thread in self._threads:
                thread.start()
            self._started = True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        call = _Call(func, future, loop)
        with self._lock:
            self._running[future] = call
        self._work.put(call)
        return future

    def abandon(self, future: asyncio.Future[Any]) -> bool:
        """Nobody waits for ``future`` any more. True if its call is still running (its
        thread now counts as stuck); a call not started yet is dropped instead."""
        with self._lock:
            if future.done():
                return False
            future.cancel()  # a call still in the work queue is then skipped
            call = self._running.get(future)
            if call is None or not call.started or call.abandoned:
                return False
            call.abandoned = True
            self._stuck += 1
            return True

    def shutdown(self) -> None:
        """Ask idle threads to exit; busy ones finish their call first (they are daemons)."""
        for _ in self._threads:
            self._work.put(_STOP)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
