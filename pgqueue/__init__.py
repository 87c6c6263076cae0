"""pgqueue: a durable background-job queue for Python that needs nothing but PostgreSQL.

Enqueue jobs inside your own transaction; run ``pgq worker``; query job state with SQL.
"""

from __future__ import annotations

from pgqueue.context import JobContext
from pgqueue.errors import (
    ArgumentError,
    ConfigurationError,
    DatabaseUnavailable,
    Discard,
    DuplicateJob,
    JobFailed,
    JobNotFound,
    LeaseLost,
    PgQueueError,
    QueueFull,
    RateLimited,
    Retry,
    ScheduleNotFound,
    SchemaOutOfDate,
    Snooze,
    TaskNotFound,
)
from pgqueue.job import Job
from pgqueue.queue import Queue
from pgqueue.queues import QueueInfo
from pgqueue.schedules import ScheduleInfo
from pgqueue.task import Task
from pgqueue.workflows import (
    TaskSignature,
    Workflow,
    WorkflowHandle,
    WorkflowStep,
    chain,
    chord,
    group,
)

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "ConfigurationError",
    "DatabaseUnavailable",
    "Discard",
    "DuplicateJob",
    "Job",
    "JobContext",
    "JobFailed",
    "JobNotFound",
    "LeaseLost",
    "PgQueueError",
    "Queue",
    "QueueFull",
    "QueueInfo",
    "RateLimited",
    "Retry",
    "ScheduleInfo",
    "ScheduleNotFound",
    "SchemaOutOfDate",
    "Snooze",
    "Task",
    "TaskNotFound",
    "TaskSignature",
    "Workflow",
    "WorkflowHandle",
    "WorkflowStep",
    "__version__",
    "chain",
    "chord",
    "group",
]
