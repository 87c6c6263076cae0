"""Finding the user's Queue from ``-A module:attribute`` (or ``PGQUEUE_APP``).

Like celery and uvicorn, the current directory goes on ``sys.path`` first, so
``pgq worker -A tasks:queue`` works from a project directory without installing it.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

import pgqueue
from pgqueue import Queue
from pgqueue.errors import a_type

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
        failure: Exception = exc
    except Exception as exc:  # the user's module raised while it was being imported
        failure = exc
    # The module exists but importing it failed: the user needs their own traceback
    # (their file first, without pgqueue's and importlib's frames), then one line.
    sys.stderr.write(user_traceback(failure))
    sys.stderr.flush()
    detail = traceback.format_exception_only(failure)[-1].strip()
    raise CommandError(
        f"cannot import module {module_name!r} (from -A {spec}): {detail}"
    ) from None


# Frames from these directories are the machinery that imported the user's module:
# pgqueue's CLI, the library, and importlib.
_OWN_DIRECTORIES = tuple(
    str(Path(path).resolve().parent) + os.sep
    for path in (__file__, pgqueue.__file__ or "", importlib.__file__ or "")
)


def _is_user_frame(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return False
    return not str(Path(filename).resolve()).startswith(_OWN_DIRECTORIES)


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` as Python prints it, keeping only the user's frames.

    A SyntaxError in the user's file has no frame of theirs; its message names the file
    and line itself.
    """
    report = traceback.TracebackException.from_exception(exc)
    report.stack = traceback.StackSummary.from_list(
        [frame for frame in report.stack if _is_user_frame(frame.filename)]
    )
    return "".join(report.format())


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
            f"-A {spec} is {a_type(value)}, not a pgqueue.Queue"
        )
    return value
