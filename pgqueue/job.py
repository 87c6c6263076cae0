"""The Job handle: a snapshot of one job's row plus the ways to follow it.

A Job is what ``enqueue`` returns and ``Queue.get_job`` finds. Its attributes are the
columns of ``pgqueue.jobs`` (or ``pgqueue.dead_jobs`` once it died) as of the last read;
``refresh()`` reads them again and ``wait()`` polls until the job has finished.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgqueue.errors import JobFailed, JobNotFound

if TYPE_CHECKING:
    from pgqueue.queue import Queue

FINISHED = frozenset({"succeeded", "cancelled", "dead"})
API_STATUSES = ("queued", "scheduled", "running", "retrying", "succeeded", "cancelled", "dead",
                "waiting")


@dataclass
class Job:
    """One job as last read from the database. ``status`` is the API status."""

    id: int
    queue: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    status: str
    priority: int = 0
    run_at: datetime | None = None
    attempts: int = 0
    max_attempts: int = 3
    idempotency_key: str | None = None
    lease_expires_at: datetime | None = None
    worker_id: str | None = None
    last_error: str | None = None
    result: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    result_ttl: int = 86400
    cancel_requested: bool = False
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    expires_at: datetime | None = None
    workflow_id: int | None = None
    waits_for: int | None = None
    concurrency_key: str | None = None
    rate_limit_key: str | None = None
    cost: float | None = None
    error: str | None = None
    failed_at: datetime | None = None
    # Succeeded, but the return value is still to come (see queries._RESULT_PENDING):
    # not a column, so not in to_dict().
    result_pending: bool = field(default=False, repr=False, compare=False)
    _queue: Queue | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_row(cls, row: dict[str, Any], queue: Queue | None = None) -> Job:
        """Build from a query row whose keys are column names (``api_status`` wins)."""
        values = {f.name: row[f.name] for f in fields(cls) if f.name in row and f.init}
        if "api_status" in row:
            values["status"] = row["api_status"]
        # Read through a connection that loads jsonb as text (Django's does, for its
        # JSONField): these columns always hold an array or an object, so text is
        # unambiguous. (``result`` is not: a JSON string looks the same either way.)
        for name in ("args", "kwargs", "meta"):
            if isinstance(values.get(name), str):
                values[name] = json.loads(values[name])
        return cls(**values, _queue=queue)

    def to_dict(self) -> dict[str, Any]:
        """The job as JSON-friendly data: the table's columns plus ``status``."""
        data: dict[str, Any] = {}
        for f in fields(self):
            if f.name.startswith("_") or f.name == "result_pending":
                continue
            value = getattr(self, f.name)
            data[f.name] = value.isoformat() if isinstance(value, datetime) else value
        return data

    @property
    def finished(self) -> bool:
        """True once the job succeeded, was cancelled or died."""
        return self.status in FINISHED

    @property
    def _settled(self) -> bool:
        """Finished, with its return value recorded: what wait() waits for. A job marked
        succeeded by ``ctx.transaction()`` gets its value a moment after that commit."""
        return self.finished and not self.result_pending

    def _owner(self) -> Queue:
        if self._queue is None:
            raise RuntimeError("this Job is not attached to a Queue; use Queue.get_job(id)")
        return self._queue

    def _update_from(self, other: Job) -> None:
        for f in fields(self):
            if not f.name.startswith("_"):
                setattr(self, f.name, getattr(other, f.name))

    def refresh(self) -> Job:
        """Read the job again; raises JobNotFound if it was pruned."""
        fresh = self._owner().get_job(self.id)
        if fresh is None:
            raise JobNotFound(f"job {self.id} no longer exists (pruned after its result_ttl)")
        self._update_from(fresh)
        return self

    async def refresh_async(self) -> Job:
        """Async :meth:`refresh`."""
        fresh = await self._owner().get_job_async(self.id)
        if fresh is None:
            raise JobNotFound(f"job {self.id} no longer exists (pruned after its result_ttl)")
        self._update_from(fresh)
        return self

    def _outcome(self) -> Any:
        if self.status == "dead":
            raise JobFailed(self.id, self.task, self.error or self.last_error)
        return self.result

    def wait(self, timeout: float | None = None, poll_interval: float = 0.05) -> Any:
        """Block until the job has finished; return its result.

        Raises :class:`~pgqueue.JobFailed` if it died and :class:`TimeoutError` when
        ``timeout`` seconds pass first. A cancelled job returns ``None``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = min(0.01, poll_interval)
        while True:
            self.refresh()
            if self._settled:
                return self._outcome()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} is still {self.status} after {timeout}s")
            pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            delay = min(delay * 2, poll_interval)

    async def wait_async(self, timeout: float | None = None, poll_interval: float = 0.05) -> Any:
        """Async :meth:`wait`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = min(0.01, poll_interval)
        while True:
            await self.refresh_async()
            if self._settled:
                return self._outcome()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} is still {self.status} after {timeout}s")
            pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            await asyncio.sleep(pause)
            delay = min(delay * 2, poll_interval)

    def cancel(self) -> Job:
        """Queued → cancelled at once; running → cancellation requested (see the worker)."""
        fresh = self._owner().cancel_job(self.id)
        self._update_from(fresh)
        return self
