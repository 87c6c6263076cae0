"""How a worker runs: :class:`WorkerSettings`, validated once, with one-line errors.

``pgq worker``'s options and ``Queue.run_worker(**settings)`` both end here. The lease,
rescue and shutdown defaults come from ``worker/timings.py``, where the lease rules'
timings are explained together.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pgqueue.errors import ConfigurationError, a_type
from pgqueue.options import queue_name
from pgqueue.settings import normalize_dsn, parse_duration, split_pool_mode
from pgqueue.worker import timings


class WorkerSettings(BaseModel):
    """How a worker runs. Durations accept seconds or strings like ``30s``, ``5m``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(default=8, ge=1, le=10_000)
    # Jobs claimed beyond the slots, held (claimed, not started) until a slot frees.
    # None: measured as the worker runs, from one job to 512 (worker/prefetch.py, with
    # the measurements behind it).
    prefetch: int | None = Field(default=None, ge=0, le=10_000)
    # Claimed in this order: the first until it has nothing ready, then the next
    # (producer.py). Empty: every queue, by priority.
    queues: list[str] = Field(default_factory=list)
    # ``--queues email:2,default:8``: at most that many of the queue's jobs held at once
    # (claimed, running, or ended with the outcome not yet committed).
    queue_slots: dict[str, int] = Field(default_factory=dict)
    poll_interval: float = 5.0
    lease: float = timings.DEFAULT_LEASE
    shutdown_timeout: float = timings.DEFAULT_SHUTDOWN_TIMEOUT
    connect_timeout: float = 30.0
    burst: bool = False
    install_signal_handlers: bool = True
    rescue_interval: float = timings.DEFAULT_RESCUE_INTERVAL
    prune_interval: float = timings.DEFAULT_PRUNE_INTERVAL
    completion_flush_interval: float = 0.002
    # An INFO line per succeeded job. Off by default: on a drain of no-op jobs it costs
    # a third of the throughput (docs/guides/operations.md, "Logs"); failures, retries
    # and dead jobs always get their line.
    log_succeeded: bool = False
    # Serve Prometheus metrics at /metrics and a health check at /healthz on this port
    # (pgqueue/metrics.py; needs the pgqueue[metrics] extra). None: no endpoint, and no
    # metric is kept. 0: any free port (logged).
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    # The address the endpoint binds: loopback by default; 0.0.0.0 for a scraper or a
    # Kubernetes probe from outside the host or pod.
    metrics_host: str = "127.0.0.1"
    # LISTEN for ready jobs. Off: poll only, a job then starts up to poll_interval after
    # it became ready (the worker says so when it starts).
    listen: bool = True
    # Where the listener connects when the worker's DSN leads to a pooler in transaction
    # mode, which cannot deliver notifications: PostgreSQL itself, or a session pooler.
    listen_dsn: str | None = None
    # The last part of the worker's id (``hostname:pid:suffix``); random unless given.
    # ``pgq worker --processes`` gives each child process its own, so the supervisor
    # knows the child's id (and can release its jobs the moment it dies) without asking.
    id_suffix: str | None = Field(default=None, pattern=r"^[0-9a-z]{1,32}$")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            first = exc.errors()[0]
            original = first.get("ctx", {}).get("error")
            if isinstance(original, ConfigurationError):  # already says which setting
                raise ConfigurationError(str(original)) from None
            where = ".".join(str(p) for p in first.get("loc", ()))
            message = str(first["msg"]).removeprefix("Value error, ")
            what = f"invalid worker setting {where}" if where else "invalid worker settings"
            raise ConfigurationError(f"{what}: {message}") from None

    @field_validator("poll_interval", "lease", "shutdown_timeout", "connect_timeout",
                     "rescue_interval", "prune_interval", "completion_flush_interval",
                     mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value, what="duration")

    @field_validator("lease")
    @classmethod
    def _lease_floor(cls, value: float) -> float:
        if value < timings.LEASE_FLOOR:
            raise ValueError(f"lease must be at least {timings.LEASE_FLOOR:g} second")
        return value

    @field_validator("listen_dsn")
    @classmethod
    def _direct_dsn(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            dsn, pool_mode = split_pool_mode(normalize_dsn(value))
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        if pool_mode == "transaction":
            raise ValueError("the listen DSN must reach PostgreSQL directly (or a pooler "
                             "in session mode), not a pooler in transaction mode")
        return dsn

    @model_validator(mode="after")
    def _slots_of_listed_queues(self) -> WorkerSettings:
        unknown = sorted(set(self.queue_slots) - set(self.queues))
        if unknown:
            raise ValueError(f"queue_slots names {', '.join(map(repr, unknown))}, which "
                             "queues does not list; give slots in queues as name:N, e.g. "
                             "'email:2,default:8'")
        if any(not 1 <= n <= 10_000 for n in self.queue_slots.values()):
            raise ValueError("queue_slots must be whole numbers from 1 to 10000")
        return self

    @model_validator(mode="after")
    def _listen_or_not(self) -> WorkerSettings:
        if self.listen_dsn is not None and not self.listen:
            raise ValueError("give a listen DSN (--listen-dsn) or no listening "
                             "(--no-listen), not both")
        return self

    @model_validator(mode="before")
    @classmethod
    def _queues_and_slots(cls, data: Any) -> Any:
        """``queues`` as names, in order; ``name:N`` entries also give ``queue_slots``,
        and ``concurrency`` defaults to their sum when every queue has slots."""
        if not isinstance(data, dict) or "queues" not in data:
            return data
        names, slots = parse_queues(data["queues"])
        data = dict(data, queues=names)
        if slots:
            data["queue_slots"] = slots
            if "concurrency" not in data and len(slots) == len(names):
                data["concurrency"] = sum(slots.values())
        return data


# What follows the last colon of a --queues entry when it gives slots (signed, so that
# "email:-2" is refused rather than taken for a queue of that name).
_SLOTS = re.compile(r"[+-]?\d+")


def parse_queues(value: Any) -> tuple[list[str], dict[str, int]]:
    """Queue names in the order given, and the slots of those given as ``name:N``.

    Accepts ``"email:2,default"``, a list of such entries, or a mapping of names to
    slots (None: no slots). The part after the last colon is slots when it is all
    digits; a queue whose own name ends in ``:digits`` is given with slots.
    """
    if isinstance(value, dict):
        entries = [f"{name}:{n}" if n is not None else str(name) for name, n in value.items()]
    elif isinstance(value, str):
        entries = [part.strip() for part in value.split(",")]
    elif isinstance(value, list | tuple):
        entries = [str(part).strip() for part in value]
    else:
        raise ConfigurationError(
            f"invalid worker setting queues: {a_type(value)}; give names separated by "
            "commas, e.g. 'high,default' or 'email:2,default:8'")
    names: list[str] = []
    slots: dict[str, int] = {}
    for entry in filter(None, entries):
        name, colon, count = entry.rpartition(":")
        if not (colon and _SLOTS.fullmatch(count.strip())):
            name, count = entry, ""
        name = queue_name(name)
        if name in names:
            raise ConfigurationError(f"invalid worker setting queues: {name!r} is given twice")
        names.append(name)
        if count:
            if not 1 <= int(count) <= 10_000:
                raise ConfigurationError(
                    f"invalid worker setting queues: {entry!r}: slots must be a whole number "
                    "from 1 to 10000 (name:N runs at most N of the queue's jobs at once)")
            slots[name] = int(count)
    return names, slots
