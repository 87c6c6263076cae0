"""Django's tasks API, from Django itself (6.0 and later: ``django.tasks``) or from the
``django-tasks`` backport (Django 4.2 to 5.2, Python 3.11), which has the same API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # checked against the backport, which is typed (py.typed)
    from django_tasks import TaskContext, TaskResult, TaskResultStatus
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist
else:
    try:  # Django 6.0+
        from django.tasks import TaskContext, TaskResult, TaskResultStatus
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError
        from django.tasks.exceptions import TaskResultDoesNotExist
    except ImportError:  # the backport
        from django_tasks import TaskContext, TaskResult, TaskResultStatus
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import TaskResultDoesNotExist


def task_backends() -> Any:
    """The registry of configured backends (``settings.TASKS``)."""
    try:
        from django.tasks import task_backends as backends
    except ImportError:
        from django_tasks import task_backends as backends
    return backends


__all__ = [
    "BaseTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
]
