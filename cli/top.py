"""``pgq top``: a live view of the queues, their throughput and the workers, like htop.

Every ``--interval`` it reads the same library functions as ``pgq stats`` and ``pgq
workers`` (``Queue.stats``, ``Queue.workers``) and the per-minute outcome counts
(``Queue.throughput``, from ``job_counts``, which outlive the pruning of finished jobs),
and redraws in place (``rich.live``). A refresh that fails (the database restarting)
shows the error and the last data, and the next refresh tries again: a monitor must not
die of what it is there to watch. ``--iterations N`` stops after N refreshes and
``--once`` prints one view and exits (scripts, tests, a terminal without a cursor).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from pgqueue import Queue
from pgqueue.settings import parse_duration
from pgqueue.stats import QueueStats, ThroughputPoint, WorkerInfo, age

from .context import CliContext, connected
from .errors import one_line_error

# Minutes of throughput read per refresh: the sparkline's width; the rate averages the
# last RATE_MINUTES of them.
HISTORY_MINUTES = 15
RATE_MINUTES = 5
_BARS = " ▁▂▃▄▅▆▇█"  # index 0 unused: a minute without jobs is "·"


@dataclass(frozen=True)
class Snapshot:
    """What one refresh read."""

    taken_at: datetime
    stats: list[QueueStats] = field(default_factory=list)
    workers: list[WorkerInfo] = field(default_factory=list)
    throughput: list[ThroughputPoint] = field(default_factory=list)


def take_snapshot(queue: Queue) -> Snapshot:
    """Read everything the view shows (three statements)."""
    return Snapshot(taken_at=datetime.now(UTC), stats=queue.stats(), workers=queue.workers(),
                    throughput=queue.throughput(minutes=HISTORY_MINUTES))


def render(snapshot: Snapshot | None, *, interval: float, error: str | None = None
           ) -> RenderableType:
    """The whole view: a header line, the queues table, the workers table."""
    now = snapshot.taken_at if snapshot else datetime.now(UTC)
    alive = sum(1 for w in snapshot.workers if w.status == "alive") if snapshot else 0
    header = Text.assemble(
        ("pgq top", "bold"), f"  {now:%Y-%m-%d %H:%M:%S}Z  ",
        (f"{alive} live worker(s)", "green" if alive else "red"),
        f"  refresh {interval:g}s, Ctrl-C quits", style="")
    parts: list[RenderableType] = [header]
    if error is not None:
        parts.append(Text(f"refresh failed: {error} (retrying)", style="bold red"))
    if snapshot is not None:
        parts += [Text(""), _queues_table(snapshot), Text(""), _workers_table(snapshot)]
    return Group(*parts)


def _queues_table(snapshot: Snapshot) -> RenderableType:
    history = _per_minute(snapshot)
    names = sorted({s.queue for s in snapshot.stats} | set(history))
    if not names:
        return Text("No queues yet: enqueue a job.")
    stats = {s.queue: s for s in snapshot.stats}
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    for column in ("queue", "queued", "sched", "retry", "running", "dead", "oldest",
                   "done/min", "fail/min", f"last {HISTORY_MINUTES}m"):
        table.add_column(column, justify="left" if column in ("queue", f"last "
                         f"{HISTORY_MINUTES}m") else "right", no_wrap=True)
    window = _rate_window(snapshot.taken_at)
    for name in names:
        entry = stats.get(name)
        minutes = history.get(name, {})
        recent = [counts for minute, counts in minutes.items() if minute >= _minute(
            snapshot.taken_at) - (RATE_MINUTES - 1) * 60]
        done = sum(c.get("succeeded", 0) for c in recent) / window
        failed = sum(c.get("failed", 0) + c.get("dead", 0) for c in recent) / window
        table.add_row(
            escape(name),
            *(f"{getattr(entry, a):,}" if entry else "0"
              for a in ("queued", "scheduled", "retrying", "running", "dead")),
            age(entry.oldest_queued_age_seconds) if entry else "-",
            f"{done:,.1f}", Text(f"{failed:,.1f}", style="red" if failed else ""),
            Text(_sparkline(minutes, snapshot.taken_at), style="cyan"),
        )
    return table


def _workers_table(snapshot: Snapshot) -> RenderableType:
    if not snapshot.workers:
        return Text("No workers running.", style="yellow")
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    for column in ("worker", "queues", "conc", "stuck", "up", "heartbeat", "status"):
        table.add_column(column, justify="right" if column in ("conc", "stuck", "up",
                                                               "heartbeat") else "left",
                         no_wrap=True)
    for worker in snapshot.workers:
        up = (snapshot.taken_at - worker.started_at).total_seconds()
        beat = (snapshot.taken_at - worker.last_heartbeat_at).total_seconds()
        table.add_row(escape(worker.id), escape(",".join(worker.queues) or "(all)"),
                      str(worker.concurrency), str(worker.stuck), age(max(0.0, up)),
                      f"{max(0.0, beat):.0f}s ago",
                      Text(worker.status, style="green" if worker.status == "alive"
                           else "red"))
    return table


def _minute(moment: datetime) -> float:
    return moment.timestamp() // 60 * 60


def _rate_window(now: datetime) -> float:
    """Minutes the rate averages over: the last RATE_MINUTES - 1 whole minutes and the
    part of the current one that has passed."""
    return RATE_MINUTES - 1 + (now.timestamp() - _minute(now)) / 60


def _per_minute(snapshot: Snapshot) -> dict[str, dict[float, dict[str, int]]]:
    """queue → minute (Unix time) → outcome → count."""
    found: dict[str, dict[float, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for point in snapshot.throughput:
        found[point.queue][point.minute.timestamp()][point.outcome] = point.count
    return found


def _sparkline(minutes: dict[float, dict[str, int]], now: datetime) -> str:
    """One character per minute of the last HISTORY_MINUTES, height by jobs finished."""
    last = _minute(now)
    totals = [sum(minutes.get(last - 60 * back, {}).values())
              for back in range(HISTORY_MINUTES - 1, -1, -1)]
    peak = max(totals)
    if not peak:
        return "·" * HISTORY_MINUTES
    return "".join("·" if not n else _BARS[max(1, round(n / peak * (len(_BARS) - 1)))]
                   for n in totals)


def refreshes(read: Callable[[], Snapshot], *, interval: float, iterations: int | None,
              sleep: Callable[[float], None] = time.sleep
              ) -> Iterator[tuple[Snapshot | None, str | None]]:
    """(snapshot, error) every ``interval`` seconds, ``iterations`` times (None: forever);
    a failed read yields the last good snapshot with its error."""
    last: Snapshot | None = None
    count = 0
    while iterations is None or count < iterations:
        if count:
            sleep(interval)
        count += 1
        try:
            last = read()
        except Exception as exc:
            message = one_line_error(exc)
            if message is None:
                raise
            yield last, message
            continue
        yield last, None


@connected(json=False)
def top(
    context: CliContext,
    interval: Annotated[
        str, typer.Option("--interval", "-i", metavar="DURATION",
                          help="Refresh this often (1s, 5s; at least 0.2s).")
    ] = "2s",
    iterations: Annotated[
        int | None, typer.Option("--iterations", "-n", metavar="N", min=1, show_default=False,
                                 help="Stop after N refreshes (default: until Ctrl-C).")
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="Print one view and exit (no live redraw).")
    ] = False,
) -> None:
    """A live view of queues, throughput and workers, refreshed in place."""
    seconds = parse_duration(interval, what="--interval")
    if seconds < 0.2:
        raise typer.BadParameter(f"{interval!r}: at least 0.2s", param_hint="'--interval'")
    console = Console(highlight=False)
    if not console.is_terminal:  # piped (--once | less): no width limit, as pgq stats
        console = Console(highlight=False, width=1000)
    with context.session() as queue:
        def read() -> Snapshot:
            return take_snapshot(queue)

        if once:
            snapshot, error = next(refreshes(read, interval=seconds, iterations=1))
            console.print(render(snapshot, interval=seconds, error=error))
            return
        with contextlib.suppress(KeyboardInterrupt), \
                Live(render(None, interval=seconds), console=console, auto_refresh=False,
                     screen=False, transient=False) as live:
            for snapshot, error in refreshes(read, interval=seconds, iterations=iterations):
                live.update(render(snapshot, interval=seconds, error=error), refresh=True)


def register(app: typer.Typer) -> None:
    """Add ``top`` to ``app``."""
    app.command()(top)
