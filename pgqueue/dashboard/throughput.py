"""The overview's throughput chart: jobs finished per minute over the last hour, drawn as
a small inline SVG (no script, no library).

The counts come from the per-minute table the workers keep (``job_counts``, revision
0011_job_counts, read by the plan ``stats.throughput``), which survives the pruning of
finished rows. A minute no worker reported is a zero bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from markupsafe import Markup, escape

from pgqueue import Queue
from pgqueue.stats import ThroughputPoint

WIDTH: Final = 600
HEIGHT: Final = 90
MINUTES: Final = 60
# Outcomes drawn red: an attempt that failed (and will run again) and a job that died.
FAILED: Final = frozenset({"failed", "dead"})


@dataclass(frozen=True)
class Minute:
    """One bar: jobs that succeeded and that failed (retried, died) in one minute."""

    start: datetime
    succeeded: int
    failed: int


@dataclass(frozen=True)
class LastHour:
    """The last hour's outcomes: the chart, and per queue its succeeded and failed jobs."""

    chart: Markup
    by_queue: dict[str, tuple[int, int]]  # queue → (succeeded, failed or dead)


def read(queue: Queue) -> list[ThroughputPoint]:
    """The last hour of ``job_counts`` (one statement)."""
    return queue.throughput(minutes=MINUTES)


def last_hour(points: Sequence[ThroughputPoint], now: datetime) -> LastHour:
    """The hour up to ``now`` (the current minute last) from :func:`read`'s points."""
    by_queue: dict[str, tuple[int, int]] = {}
    for point in points:
        ok, bad = by_queue.get(point.queue, (0, 0))
        if point.outcome == "succeeded":
            ok += point.count
        elif point.outcome in FAILED:
            bad += point.count
        by_queue[point.queue] = (ok, bad)
    return LastHour(svg(minutes(points, now)), by_queue)


def minutes(points: Sequence[ThroughputPoint], now: datetime, count: int = MINUTES
            ) -> list[Minute]:
    """One :class:`Minute` per minute of the last ``count`` (every queue summed), zeros
    where no job finished."""
    last = now.replace(second=0, microsecond=0)
    starts = [last - timedelta(minutes=count - 1 - index) for index in range(count)]
    succeeded = dict.fromkeys(starts, 0)
    failed = dict.fromkeys(starts, 0)
    for point in points:
        if point.minute in succeeded:
            if point.outcome == "succeeded":
                succeeded[point.minute] += point.count
            elif point.outcome in FAILED:
                failed[point.minute] += point.count
    return [Minute(start, succeeded[start], failed[start]) for start in starts]


def svg(minutes: Sequence[Minute]) -> Markup:
    """Stacked bars, one per minute, succeeded below failed; each with a tooltip."""
    peak = max((m.succeeded + m.failed for m in minutes), default=0)
    scale = peak or 1  # an empty hour: flat bars
    slot = WIDTH / max(len(minutes), 1)
    bars = []
    for index, minute in enumerate(minutes):
        x = index * slot
        ok = minute.succeeded / scale * (HEIGHT - 4)
        bad = minute.failed / scale * (HEIGHT - 4)
        title = escape(f"{minute.start:%H:%M} UTC: {minute.succeeded} succeeded, "
                       f"{minute.failed} failed")
        bars.append(
            f'<g><title>{title}</title>'
            f'<rect class="ok" x="{x + 1:.1f}" y="{HEIGHT - ok:.1f}" '
            f'width="{max(slot - 2, 1):.1f}" height="{ok:.1f}"/>'
            f'<rect class="bad" x="{x + 1:.1f}" y="{HEIGHT - ok - bad:.1f}" '
            f'width="{max(slot - 2, 1):.1f}" height="{bad:.1f}"/></g>'
        )
    return Markup(  # noqa: S704 (every value above is a number or escaped)
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="none" '
        f'role="img" aria-label="jobs finished per minute, last hour">{"".join(bars)}</svg>'
        f'<div class="axis"><span>{len(minutes)} min ago</span>'
        f'<span>peak {peak}/min</span><span>now</span></div>'
    )
