"""``pgq dead list|retry|purge``: jobs that ran out of attempts or were discarded."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pgqueue.dead_jobs import DeadRetryResult
from pgqueue.settings import parse_duration
from pgqueue.stats import last_line, when

from .context import CliContext, connected
from .options import LimitOption, QueueFilterOption
from .output import more_line, output, print_table

app = typer.Typer(
    help="Inspect, retry and purge dead jobs.", no_args_is_help=True, rich_markup_mode=None
)


@app.command("list")
@connected(json=True)
def list_dead(
    context: CliContext, queue_name: QueueFilterOption = None, limit: LimitOption = 50
) -> None:
    """Dead jobs, most recently failed first."""
    with context.session() as queue:
        found = queue.dead_jobs(queue=queue_name, limit=limit + 1)
    more = more_line(len(found), limit, "dead jobs", "--queue")
    found = found[:limit]
    output(context, found, lambda: print_table(
        ["id", "queue", "task", "attempts", "failed_at", "error"],
        (
            [job.id, job.queue, job.task, job.attempts, when(job.failed_at),
             last_line(job.error)]
            for job in found
        ),
        empty="No dead jobs.",
        right=("id", "attempts"),
        clip=("error",),
        more=more,
    ))


@app.command("retry")
@connected(json=True)
def retry_dead(
    context: CliContext,
    job_ids: Annotated[
        list[int] | None,
        typer.Argument(help="Ids of the dead jobs to retry.", show_default=False,
                       metavar="ID"),
    ] = None,
    retry_all: Annotated[
        bool, typer.Option("--all", help="Retry every dead job (or every one of --queue).")
    ] = False,
    queue_name: QueueFilterOption = None,
) -> None:
    """Put dead jobs back on their queue, keeping their ids (attempts start again at 0).

    A job whose idempotency key a newer live job holds is refused and stays dead; each
    refusal is reported on stderr, and a refused ID named on the command line makes the
    exit status 1.
    """
    if job_ids and retry_all:
        raise typer.BadParameter("give job ids or --all, not both", param_hint="'ID'")
    if not job_ids and not retry_all:
        raise typer.BadParameter("name the dead jobs to retry, or give --all",
                                 param_hint="'ID'")
    if queue_name is not None and not retry_all:
        raise typer.BadParameter("--queue applies to --all only", param_hint="'--queue'")
    with context.session() as queue:
        outcome = queue.retry_dead(None if retry_all else job_ids, queue=queue_name)
    output(context, outcome, lambda: _retried(outcome))
    for job_id in sorted(outcome.refused):
        reason = outcome.refused[job_id].message
        print(f"error: cannot retry dead job {job_id}: {reason}", file=sys.stderr)
    if outcome.refused and not retry_all:
        raise typer.Exit(1)


def _retried(outcome: DeadRetryResult) -> None:
    for job_id in outcome.retried:
        typer.echo(f"Retried dead job {job_id}: queued again.")
    if not outcome.retried and not outcome.refused:
        typer.echo("No dead jobs to retry.")


@app.command("purge")
@connected(json=True)
def purge_dead(
    context: CliContext,
    older_than: Annotated[
        str,
        typer.Option("--older-than", metavar="DURATION", show_default=False,
                     help="Delete dead jobs that failed longer ago than this (e.g. 7d)."),
    ],
    queue_name: QueueFilterOption = None,
) -> None:
    """Delete old dead jobs for good."""
    seconds = parse_duration(older_than, what="--older-than")
    with context.session() as queue:
        purged = queue.purge_dead(seconds, queue=queue_name)
    where = f" from queue {queue_name!r}" if queue_name else ""
    output(context, {"purged": purged}, lambda: typer.echo(
        f"Purged {purged} dead job(s){where} that failed more than {older_than} ago."
    ))
