"""Finding the user's Queue from ``-A module:attribute`` (or ``PGQUEUE_APP``).

Like celery and uvicorn, the current directory goes on ``sys.path`` first, so
``pgq worker -A tasks:queue`` works from a project directory without installing it.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

from pgqueue import Queue

from .errors import CommandError


def _import(module_name: str, spec: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise CommandError(
                f"cannot import module {module_name!r} (from -A {spec}): no such module "
                f"in {cwd} or on PYTHONPATH"
            ) from None
        raise  # the module exists but an import inside it failed: show the traceback


def _only_queue(module: ModuleType, spec: str) -> Queue:
    found = {name: value for name, value in vars(module).items() if isinstance(value, Queue)}
    if len(found) == 1:
        return next(iter(found.values()))
    if not found:
        raise CommandError(f"module {module.__name__!r} (from -A {spec}) defines no Queue")
    names = ", ".join(sorted(found))
    raise CommandError(
        f"module {module.__name__!r} defines several Queues ({names}); "
        f"say which with -A {module.__name__}:NAME"
    )


def load_queue(spec: str) -> Queue:
    """Import ``module[:attribute]`` and return the Queue it names (or its only Queue)."""
    module_name, _, attribute = spec.strip().partition(":")
    if not module_name:
        raise CommandError(
            f"invalid -A {spec!r}: expected module:attribute, e.g. myapp.tasks:queue"
        )
    module = _import(module_name, spec)
    if not attribute:
        return _only_queue(module, spec)
    value: object = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise CommandError(
                f"module {module_name!r} has no attribute {attribute!r} (from -A {spec})"
            ) from None
    if not isinstance(value, Queue):
        raise CommandError(
            f"-A {spec} is a {type(value).__name__}, not a pgqueue.Queue"
        )
    return value
