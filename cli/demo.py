"""``pgq demo``: see pgqueue work in a few seconds, with nothing set up beforehand.

It starts the embedded PostgreSQL (data in ``.pgqueue/`` here) unless ``--dsn`` names a
database on its command line (``PGQUEUE_DSN`` and ``DATABASE_URL`` are not used),
migrates, enqueues a few thousand sample jobs in bulk on a fresh queue, and runs a real
worker in this process while a live display follows ``Queue.stats()``. The summary counts
come from the database afterwards, not from the display, so they are honest: succeeded,
retried (jobs that needed more than one attempt), dead.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from psycopg.conninfo import conninfo_to_dict
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from pgqueue import ConfigurationError, Queue, Task
from pgqueue.queues import DEFAULT_SETTINGS
from pgqueue.settings import EMBEDDED
from pgqueue.stats import QueueStats
from pgqueue.worker import BackgroundWorker, WorkerSettings

from . import demo_tasks
from .context import CliContext, connected
from .logs import configure_logging
from .output import output

# How the sample jobs are split (per mille); the fast async task takes the rest.
MIX: list[tuple[Task[Any, Any], int, str]] = [
    (demo_tasks.checksum, 200, "sync, runs in the worker's thread pool"),
    (demo_tasks.flaky, 80, "fails once, succeeds on its retry"),
    (demo_tasks.doomed, 20, "always fails: dead after 2 attempts"),
]
POLL_SECONDS = 0.1
DEMO_QUEUE = "demo"


@dataclass(frozen=True)
class Summary:
    """What the demo did, counted in the database once the worker has finished."""

    queue: str
    jobs: int
    succeeded: int
    retried: int
    dead: int
    unfinished: int
    enqueue_seconds: float
    elapsed_seconds: float

    @property
    def jobs_per_second(self) -> float:
        """Finished jobs per second of processing."""
        finished = self.jobs - self.unfinished
        return finished / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` shape."""
        return asdict(self) | {"jobs_per_second": round(self.jobs_per_second, 1)}


def job_mix(total: int) -> list[tuple[Task[Any, Any], int, str]]:
    """How many jobs of each sample task; every behaviour appears at least once."""
    planned = [(task, max(1, total * share // 1000), what) for task, share, what in MIX]
    rest = total - sum(count for _, count, _ in planned)
    if rest < 1:
        raise ConfigurationError(f"--jobs {total} is too few: use at least {len(MIX) + 1}")
    return [(demo_tasks.ping, rest, "async, does nothing: the fast path"), *planned]


def _enqueue(mix: list[tuple[Task[Any, Any], int, str]], name: str, rounds: int = 10) -> int:
    """Enqueue the mix in a few interleaved rounds; return the number of statements.

    Interleaving spreads the failing tasks over the run, so retries and dead jobs show
    up on the live display as it goes rather than all at the end.
    """
    statements = 0
    for round_number in range(rounds):
        for task, count, _ in mix:
            numbers = range(round_number, count, rounds)
            if numbers:
                task.using(queue=name).enqueue_many((n,) for n in numbers)
                statements += 1
    return statements


def _database_label(context: CliContext, queue: Queue) -> str:
    """Where the demo runs, without credentials."""
    if context.explicit_dsn == EMBEDDED:
        return f"embedded PostgreSQL in {Path.cwd() / '.pgqueue'}"
    info = conninfo_to_dict(queue.dsn)
    host = str(info.get("host") or "localhost")
    port = f":{info['port']}" if info.get("port") else ""
    return f"PostgreSQL {info.get('user', '')}@{host}{port}/{info.get('dbname', '')}".replace(
        " @", " "
    )


def _choose_database(context: CliContext) -> CliContext:
    """``--dsn`` (or ``--embedded``) from the command line; else the embedded server.

    Never ``PGQUEUE_DSN`` or ``DATABASE_URL``: those usually name an application's
    database, and a demo must not create tables and queues there unasked.
    """
    if context.explicit_dsn is not None:
        return context
    return context.merged(embedded=True)


def _ignored_settings() -> list[str]:
    """The DSN variables set in the environment, which the demo does not use."""
    return [name for name in ("PGQUEUE_DSN", "DATABASE_URL") if os.environ.get(name)]


def _queue_counts(queue: Queue, name: str) -> QueueStats | None:
    for entry in queue.stats():
        if entry.queue == name:
            return entry
    return None


def _status_line(counts: QueueStats | None) -> Text:
    parts = [
        (name, getattr(counts, name) if counts is not None else 0)
        # No "retrying": the demo retries at once (a burst worker leaves later jobs behind).
        for name in ("queued", "running", "succeeded", "dead")
    ]
    line = Text("  ")
    styles = {"succeeded": "green", "dead": "red", "running": "cyan"}
    for index, (name, value) in enumerate(parts):
        if index:
            line.append("  ·  ", style="dim")
        line.append(f"{name} ", style="dim")
        line.append(f"{value:,}", style=styles.get(name, ""))
    return line


def _run_with_display(
    queue: Queue, runner: BackgroundWorker, name: str, total: int, console: Console | None
) -> float:
    """Run the worker to completion, showing progress if ``console``; return the seconds."""
    progress = Progress(
        TextColumn("[bold]Processing"),
        BarColumn(),
        TextColumn("{task.completed:>6,.0f}/{task.total:,.0f}"),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[rate]}"),
        console=console,
    )
    bar: TaskID = progress.add_task("jobs", total=total, rate="")
    started = time.monotonic()
    runner.start()
    with contextlib.ExitStack() as stack:
        live = None
        if console is not None:
            live = stack.enter_context(
                Live(Group(progress, _status_line(None)), console=console,
                     refresh_per_second=12)
            )
        while True:
            running = runner.running
            if live is not None:
                counts = _queue_counts(queue, name)
                done = counts.succeeded + counts.dead if counts is not None else 0
                seconds = time.monotonic() - started
                rate = f"{done / seconds:,.0f} jobs/s" if seconds > 0.2 else ""
                progress.update(bar, completed=done, rate=rate)
                live.update(Group(progress, _status_line(counts)))
            if not running:
                break
            runner.join(POLL_SECONDS)
    return time.monotonic() - started


def _summarize(queue: Queue, name: str, total: int, enqueue_seconds: float,
               elapsed: float) -> Summary:
    jobs = queue.list_jobs(queue=name, limit=max(total, 1))
    by_status: dict[str, int] = {}
    for job in jobs:
        by_status[job.status] = by_status.get(job.status, 0) + 1
    return Summary(
        queue=name,
        jobs=total,
        succeeded=by_status.get("succeeded", 0),
        retried=sum(1 for job in jobs if job.attempts > 1),
        dead=by_status.get("dead", 0),
        unfinished=total - by_status.get("succeeded", 0) - by_status.get("dead", 0),
        enqueue_seconds=round(enqueue_seconds, 3),
        elapsed_seconds=round(elapsed, 3),
    )


def _summary_table(summary: Summary) -> Table:
    table = Table(title="pgqueue demo: summary", title_justify="left", show_header=False,
                  box=None, pad_edge=False, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="dim")
    table.add_row("Jobs", f"{summary.jobs:,}", f"queue {summary.queue}")
    table.add_row("Succeeded", f"[green]{summary.succeeded:,}[/]", "")
    table.add_row("Retried", f"[yellow]{summary.retried:,}[/]",
                  "jobs that needed more than one attempt")
    table.add_row("Dead", f"[red]{summary.dead:,}[/]", "in pgqueue.dead_jobs, with tracebacks")
    if summary.unfinished:
        table.add_row("Unfinished", f"{summary.unfinished:,}", "left queued (worker stopped)")
    table.add_row("Elapsed", f"{summary.elapsed_seconds:.2f} s",
                  f"plus {summary.enqueue_seconds:.2f} s to enqueue in bulk")
    table.add_row("Throughput", f"{summary.jobs_per_second:,.0f} jobs/s", "")
    return table


@connected(json=True)
def demo(
    context: CliContext,
    jobs: Annotated[
        int, typer.Option("--jobs", "-n", min=4, metavar="N", help="How many sample jobs to run.")
    ] = 5000,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, metavar="C",
                     help="The worker's concurrency.")
    ] = 16,
) -> None:
    """Run sample jobs through a real worker and show what happens (no setup needed)."""
    context = _choose_database(context)
    mix = job_mix(jobs)
    configure_logging("warning", job_records=False)
    console = None if context.json else Console(highlight=False)
    queue = context.configure(demo_tasks.queue)
    say = console.print if console is not None else (lambda *_a, **_k: None)
    try:
        if console is not None and context.explicit_dsn == EMBEDDED:
            with console.status("Starting the embedded PostgreSQL (first run: a few seconds)…"):
                queue.dsn  # noqa: B018 - resolving the DSN starts the server
        say(f"[bold]pgqueue demo[/] on {_database_label(context, queue)}")
        ignored = _ignored_settings()
        if ignored and context.explicit_dsn == EMBEDDED:
            say(f"[dim]{' and '.join(ignored)} set but not used: the demo runs on the "
                "embedded server unless you pass --dsn.[/]")
        say(f"[green]✓[/] {escape(queue.migrate().describe())} (pgq migrate)")

        # One queue for every run, emptied first: an interrupted run leaves no backlog
        # behind for the next, and `pgq stats` does not grow a queue per run.
        name = DEMO_QUEUE
        left = queue.purge_queue(name)
        if left:
            say(f"[green]✓[/] removed {left:,} jobs an earlier demo left in queue {name!r}")
        # Settings someone tried on the demo's queue (pgq queues pause demo) would hold its
        # jobs: the demo's queue runs with the defaults.
        state = queue.set_queue(name)
        if state.paused or state.settings != DEFAULT_SETTINGS:
            queue.resume_queue(name)
            queue.set_queue(name, **DEFAULT_SETTINGS)
            say(f"[green]✓[/] reset queue {name!r} to its defaults (it was "
                f"{'paused' if state.paused else 'configured'}: pgq queues list)")
        started = time.monotonic()
        statements = _enqueue(mix, name)
        enqueue_seconds = time.monotonic() - started
        say(f"[green]✓[/] enqueued {jobs:,} jobs on queue [bold]{name}[/] in "
            f"{enqueue_seconds:.2f} s ({statements} bulk inserts with enqueue_many):")
        for task, count, what in mix:
            say(f"    {count:>7,}  {task.name:<14} [dim]{what}[/]")

        settings = WorkerSettings(concurrency=concurrency, queues=[name], burst=True,
                                  install_signal_handlers=False, poll_interval=1.0)
        runner = BackgroundWorker(queue, settings)
        say(f"[green]✓[/] worker started in this process (concurrency {concurrency}, "
            "--burst: exits when the queue is drained)")
        interrupted = False
        elapsed = 0.0
        try:
            elapsed = _run_with_display(queue, runner, name, jobs, console)
        except KeyboardInterrupt:
            say("[yellow]Interrupted: stopping the worker gracefully…[/]")
            interrupted = True
        finally:
            # Whatever happened here, the worker must not outlive the command (nor the
            # embedded server, which stops when this process exits).
            runner.stop()
            runner.join()
        if interrupted:
            # The worker has stopped (and removed its row) before the embedded server,
            # which stops when this process exits; what it did not run goes too.
            removed = queue.purge_queue(name)
            say(f"[yellow]Stopped; removed the demo's {removed:,} jobs (queue {name!r} is "
                "empty again).[/]")
            raise typer.Exit(130)
        if runner.error is not None:
            raise runner.error
        summary = _summarize(queue, name, jobs, enqueue_seconds, elapsed)
    finally:
        queue.close()
    where = "--embedded" if context.explicit_dsn == EMBEDDED else "--dsn …"
    output(context, summary, lambda: _print_summary(summary, where))


def _print_summary(summary: Summary, where: str) -> None:
    console = Console(highlight=False)
    console.print()
    console.print(_summary_table(summary))
    console.print("\n[dim]Look around:[/]")
    for command in (f"pgq stats {where}",
                    f"pgq jobs list {where} --queue {summary.queue} --limit 10",
                    f"pgq dead list {where} --queue {summary.queue}"):
        console.print(f"  {command}", markup=False)


def register(app: typer.Typer) -> None:
    """Add ``demo`` to ``app``."""
    app.command()(demo)
