"""``pgq jobs list|show|cancel``: find and manage individual jobs."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from pgqueue import Job, Queue
from pgqueue.stats import last_line, when

from .context import CliContext, connected
from .errors import CommandError
from .options import LimitOption, QueueFilterOption
from .output import attempts, console, job_summary, output, print_table

app = typer.Typer(
    help="List, inspect and cancel jobs.", no_args_is_help=True, rich_markup_mode=None
)

JobId = Annotated[int, typer.Argument(help="The job's id.", show_default=False, metavar="ID")]


@app.command("list")
@connected(json=True)
def list_jobs(
    context: CliContext,
    status: Annotated[
        str | None,
        typer.Option("--status", "-s", metavar="STATUS", show_default=False,
                     help="queued, scheduled, running, retrying, waiting, succeeded, "
                          "cancelled or dead."),
    ] = None,
    queue_name: QueueFilterOption = None,
    task: Annotated[
        str | None, typer.Option("--task", "-t", metavar="TASK", help="Only this task.",
                     show_default=False)
    ] = None,
    limit: LimitOption = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", metavar="CURSOR", show_default=False,
                                 help="Start after this job (the cursor printed under a "
                                      "full page).")
    ] = None,
) -> None:
    """Jobs, newest first (live and dead), a page at a time."""
    with context.session() as queue:
        page = queue.job_page(status=status, queue=queue_name, task=task, limit=limit,
                              cursor=cursor)
    found = page.jobs
    more = None
    if page.next_cursor is not None:
        more = (f"(the first {limit} jobs; more exist: add --cursor {page.next_cursor} for "
                "the next page, or narrow with --status, --queue or --task)")
    output(context, found, lambda: print_table(
        ["id", "queue", "task", "status", "attempts", "priority", "run_at", "created_at"],
        (
            [job.id, job.queue, job.task, job.status, attempts(job), job.priority,
             when(job.run_at), when(job.created_at)]
            for job in found
        ),
        empty="No jobs match.",
        right=("id", "attempts", "priority"),
        more=more,
    ))


def _describe(job: Job) -> None:
    """Every field of one job, the error's traceback in full."""
    fields = job.to_dict()
    error = fields.pop("error", None) or fields.pop("last_error", None)
    fields.pop("last_error", None)
    out = console()
    width = max(len(name) for name in fields)
    for name, value in fields.items():
        if name in ("args", "kwargs", "result", "meta"):
            value = json.dumps(value, ensure_ascii=False)
        out.print(f"{name:<{width}}  {'-' if value is None else value}", markup=False)
    if error:
        title = "error" if job.status == "dead" else "last error"
        out.print(f"\n{title}:\n{error.rstrip()}", markup=False)


def _existing(queue: Queue, job_id: int) -> Job:
    job = queue.get_job(job_id)
    if job is None:
        raise CommandError(f"no job with id {job_id}")
    return job


@app.command("show")
@connected(json=True)
def show_job(context: CliContext, job_id: JobId) -> None:
    """One job in full (also finds dead jobs)."""
    with context.session() as queue:
        job = _existing(queue, job_id)
    output(context, job, lambda: _describe(job))


@app.command("cancel")
@connected(json=True)
def cancel_job(context: CliContext, job_id: JobId) -> None:
    """Cancel a job: a queued one at once, a running one at its next heartbeat."""
    with context.session() as queue:
        # Read first so that "already finished" can be told apart from "cancelled now".
        before = _existing(queue, job_id)
        job = before if before.finished else queue.cancel_job(job_id)
    output(context, job, lambda: _cancelled(job, already_finished=before.finished))


def _cancelled(job: Job, *, already_finished: bool) -> None:
    if already_finished:
        typer.echo(f"Nothing to cancel: {job_summary(job)}")
        if job.status == "dead":
            typer.echo(f"Last error: {last_line(job.error)}")
    elif job.status == "cancelled":
        typer.echo(f"Cancelled {job_summary(job, status=False)}")
    else:
        typer.echo(f"Cancellation requested for {job_summary(job)} (the worker stops it "
                   "at its next heartbeat)")
