"""pgq top's view (cli/top.py) from snapshots, without a database or a terminal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from rich.console import Console

from pgqueue.cli.top import Snapshot, _sparkline, refreshes, render
from pgqueue.stats import QueueStats, ThroughputPoint, WorkerInfo

NOW = datetime(2026, 12, 4, 9, 30, 30, tzinfo=UTC)  # half-way through a minute


def _text(snapshot: Snapshot | None, error: str | None = None) -> str:
    console = Console(record=True, width=140)
    console.print(render(snapshot, interval=2, error=error))
    return console.export_text()


def _stats(queue: str, queued: int) -> QueueStats:
    return QueueStats(queue=queue, queued=queued, scheduled=1, retrying=2, waiting=0,
                      running=3, succeeded=10, cancelled=0, dead=4,
                      oldest_queued_age_seconds=12.5)


def _point(minutes_ago: int, outcome: str, count: int, queue: str = "mail") -> ThroughputPoint:
    minute = NOW.replace(second=0) - timedelta(minutes=minutes_ago)
    return ThroughputPoint(minute=minute, queue=queue, outcome=outcome, count=count)


def test_the_view_shows_counts_rates_sparkline_and_workers() -> None:
    worker = WorkerInfo(id="h:1:ab", hostname="h", pid=1, queues=[], concurrency=8, stuck=0,
                        started_at=NOW - timedelta(hours=2),
                        last_heartbeat_at=NOW - timedelta(seconds=3),
                        lease_expires_at=NOW + timedelta(seconds=27), status="alive")
    snapshot = Snapshot(
        taken_at=NOW, stats=[_stats("mail", 7)], workers=[worker],
        throughput=[_point(0, "succeeded", 45), _point(1, "succeeded", 90),
                    _point(2, "failed", 9), _point(10, "succeeded", 900),
                    _point(0, "dead", 1, queue="gone")])
    text = _text(snapshot)
    assert "pgq top  2026-12-04 09:30:30Z  1 live worker(s)" in text
    mail = next(line for line in text.splitlines() if line.startswith("mail "))
    # The last 5 minutes, the current one half gone: 4.5 minutes.
    assert mail.split()[:10] == ["mail", "7", "1", "2", "3", "4", "12.5s",
                                 f"{135 / 4.5:.1f}", f"{9 / 4.5:.1f}", "····█·······▁▁▁"]
    # A queue with outcomes and no live jobs any more still shows its rates.
    gone = next(line for line in text.splitlines() if line.startswith("gone "))
    assert gone.split()[1:7] == ["0", "0", "0", "0", "0", "-"]
    assert "h:1:ab" in text and "(all)" in text and "3s ago" in text and "2.0h" in text


def test_the_view_says_when_there_is_nothing_and_when_a_refresh_failed() -> None:
    empty = _text(Snapshot(taken_at=NOW))
    assert "0 live worker(s)" in empty
    assert "No queues yet" in empty and "No workers running." in empty
    failed = _text(None, error="cannot reach the database: refused")
    assert "refresh failed: cannot reach the database: refused (retrying)" in failed


def test_sparkline_scales_to_the_busiest_minute() -> None:
    minutes = {NOW.replace(second=0).timestamp() - 60 * back: {"succeeded": n}
               for back, n in ((0, 8), (1, 4), (14, 1))}
    assert _sparkline(minutes, NOW) == "▁" + "·" * 12 + "▄█"
    assert _sparkline({}, NOW) == "·" * 15


def test_refreshes_survive_a_failed_read_and_stop_after_the_iterations() -> None:
    reads = iter([Snapshot(taken_at=NOW), psycopg.OperationalError("server closed"),
                  Snapshot(taken_at=NOW + timedelta(seconds=2))])
    sleeps: list[float] = []

    def read() -> Snapshot:
        value = next(reads)
        if isinstance(value, Exception):
            raise value
        return value

    seen = list(refreshes(read, interval=2, iterations=3, sleep=sleeps.append))
    assert [(s.taken_at if s else None, e) for s, e in seen] == [
        (NOW, None), (NOW, "cannot reach the database: server closed"),
        (NOW + timedelta(seconds=2), None)]
    assert sleeps == [2, 2]


def test_a_bug_in_a_read_is_not_swallowed() -> None:
    def read() -> Snapshot:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        list(refreshes(read, interval=1, iterations=1))
