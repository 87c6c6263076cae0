"""Django's tasks API, from Django itself (6.0 and later: ``django.tasks``) or from the
``django-tasks`` backport (Django 4.2 to 5.2, Python 3.11), which has the same API."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # checked against the backport, which is typed (py.typed)
    from django_tasks import TaskContext, TaskResult, TaskResultStatus
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist
else:
    try:  # Django 6.0+
        import django.tasks as _api
    except ImportError:  # the backport
        import django_tasks as _api

    def _module(name: str) -> Any:
        try:
            return importlib.import_module(f"{_api.__name__}.{name}")
        except ImportError:
            return None

    def _find(name: str, *modules: Any) -> Any:
        """``name`` from the package or the first of its modules that has it (Django's
        layout moved between releases; the public names did not)."""
        for module in (_api, *modules):
            if module is not None and hasattr(module, name):
                return getattr(module, name)
        raise ImportError(f"{_api.__name__} has no {name}: this version of Django's tasks "
                          "framework is not supported")

    _base, _task = _module("base"), _module("task")
    TaskContext = _find("TaskContext", _base, _task)
    TaskResult = _find("TaskResult", _base, _task)
    TaskResultStatus = _find("TaskResultStatus", _base, _task)
    Task = _find("Task", _base, _task)
    TaskError = _find("TaskError", _base, _task)
    BaseTaskBackend = _find("BaseTaskBackend", _module("backends.base"))
    TaskResultDoesNotExist = _find("TaskResultDoesNotExist", _module("exceptions"))


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
