"""Worker settings: the contract's defaults, durations, queue lists, one-line errors."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgqueue import ConfigurationError, Queue
from pgqueue.worker import WorkerSettings


def test_defaults_follow_the_contract() -> None:
    settings = WorkerSettings()
    assert settings.concurrency == 8
    assert settings.queues == []  # every queue
    assert settings.poll_interval == 5.0
    assert settings.lease == 30.0
    assert settings.shutdown_timeout == 30.0
    assert settings.connect_timeout == 30.0
    assert settings.burst is False
    # expired leases are recovered within lease + 5 s: the rescuer runs every second
    assert settings.rescue_interval <= 5.0
    # finished rows are deleted within a minute after their result_ttl passes
    assert settings.prune_interval <= 30.0


def test_heartbeats_every_third_of_the_lease() -> None:
    from pgqueue.db.queries import for_schema
    from pgqueue.worker.heartbeat import Heartbeat

    async def never() -> psycopg.AsyncConnection[Any]:
        raise AssertionError("no heartbeat runs here")

    from pgqueue.worker.ledger import Ledger
    from pgqueue.worker.prefetch import Prefetch

    heartbeat = Heartbeat(connect=never, queries=for_schema("pgqueue"),
                          registration={}, lease=30.0,
                          ledger=Ledger(concurrency=1, prefetch=Prefetch(0, concurrency=1)),
                          holdings=list,
                          on_lease_lost=lambda e: None, on_cancel_requested=lambda e: None)
    assert heartbeat.interval == 10.0


def test_durations_and_queue_lists() -> None:
    settings = WorkerSettings(poll_interval="250ms", lease="1m", shutdown_timeout="2m",
                              queues="email, default,,reports")
    assert (settings.poll_interval, settings.lease, settings.shutdown_timeout) == (
        0.25, 60.0, 120.0)
    assert settings.queues == ["email", "default", "reports"]
    assert WorkerSettings(queues=["a", ""]).queues == ["a"]


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": "many"}, "concurrency"),
        ({"lease": 0.5}, "lease"),
        ({"lease": "forever"}, "invalid duration"),
        ({"poll_interval": -1}, "invalid duration"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_settings_are_one_line_configuration_errors(
    settings: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        WorkerSettings(**settings)
    assert fragment in str(raised.value)
    assert "\n" not in str(raised.value)
    with pytest.raises(ConfigurationError):
        Queue(dsn="postgresql://u@h/db").worker_settings(**settings)


@pytest.mark.parametrize(("queues", "extra", "names", "slots", "concurrency"), [
    ("email:2,default:8", {}, ["email", "default"], {"email": 2, "default": 8}, 10),
    ("email:2,default", {}, ["email", "default"], {"email": 2}, 8),  # not all: the default
    ("email:2,default:8", {"concurrency": 4}, ["email", "default"],
     {"email": 2, "default": 8}, 4),  # --concurrency stays the total
    (["high", "default", "low"], {}, ["high", "default", "low"], {}, 8),
    ({"email": 2, "bulk": None}, {}, ["email", "bulk"], {"email": 2}, 8),
    ("tenant:42:3", {}, ["tenant:42"], {"tenant:42": 3}, 3),  # slots after the last colon
    ("email:x", {}, ["email:x"], {}, 8),  # not a number: part of the name
    ("email:+3", {}, ["email"], {"email": 3}, 3),
])
def test_queue_lists_with_slots(
    queues: Any, extra: dict[str, Any], names: list[str], slots: dict[str, int],
    concurrency: int,
) -> None:
    settings = WorkerSettings(queues=queues, **extra)
    assert (settings.queues, settings.queue_slots, settings.concurrency) == (
        names, slots, concurrency)


@pytest.mark.parametrize(("settings", "message"), [
    ({"queues": "email:0"}, "invalid worker setting queues: 'email:0': slots must be"),
    ({"queues": "email:-2"}, "invalid worker setting queues: 'email:-2': slots must be"),
    ({"queues": "email:10001"}, "slots must be a whole number from 1 to 10000"),
    ({"queues": "a,b,a"}, "invalid worker setting queues: 'a' is given twice"),
    ({"queues": "a,b,c:2,a:3"}, "'a' is given twice"),
    ({"queues": 5}, "invalid worker setting queues: an int"),
    ({"queue_slots": {"x": 2}}, "queue_slots names 'x', which queues does not list"),
])
def test_bad_queue_slots_are_one_line_errors(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        WorkerSettings(**settings)
    assert message in str(raised.value) and "\n" not in str(raised.value)
