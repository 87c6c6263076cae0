"""A fixed pool of daemon threads for synchronous tasks.

Not ``concurrent.futures.ThreadPoolExecutor``: its threads are joined at interpreter exit,
so one sync task stuck past its timeout or past the shutdown deadline would keep a
stopping worker alive forever. Daemon threads let the process exit once every job it held
has been released; the stuck call's late result is then fenced out by the database.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_STOP = object()


class DaemonThreadPool:
    """Runs callables on ``size`` daemon threads; results come back as asyncio futures."""

    def __init__(self, size: int, name: str = "pgqueue-task") -> None:
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True)
            for n in range(size)
        ]
        self._started = False

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is _STOP:
                return
            func, future, loop = item
            if future.cancelled():
                continue
            try:
                result = func()
            except BaseException as exc:
                loop.call_soon_threadsafe(_settle, future, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, future, result, None)

    def submit(self, func: Callable[[], T]) -> asyncio.Future[T]:
        """Schedule ``func`` on a pool thread; await the returned future for its result."""
        if not self._started:
            for thread in self._threads:
                thread.start()
            self._started = True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._work.put((func, future, loop))
        return future

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
