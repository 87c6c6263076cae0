"""``pgq workflows show|cancel``: follow and stop a chain, group, chord or Workflow."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from pgqueue import Queue
from pgqueue.stats import last_line, when
from pgqueue.workflows import WorkflowHandle, WorkflowStep

from .context import CliContext, connected
from .errors import CommandError
from .output import attempts, console, output, print_table

app = typer.Typer(
    help="Show and cancel workflows (chains, groups, chords).", no_args_is_help=True,
    rich_markup_mode=None,
)

WorkflowId = Annotated[int, typer.Argument(
    help="The workflow's id (the id of its first step; every step's workflow_id).",
    show_default=False, metavar="ID",
)]


def _existing(queue: Queue, workflow_id: int) -> WorkflowHandle:
    handle = queue.get_workflow(workflow_id)
    if handle is None:
        raise CommandError(f"no workflow with id {workflow_id}")
    return handle


@app.command("show")
@connected(json=True)
def show_workflow(context: CliContext, workflow_id: WorkflowId) -> None:
    """A workflow's steps: state, what each waits for, result or error."""
    with context.session() as queue:
        handle = _existing(queue, workflow_id)
        steps = handle.steps()
    described = handle.describe(steps)
    output(context, described, lambda: _print(described, steps))


def _print(described: dict[str, object], steps: list[WorkflowStep]) -> None:
    console().print(f"workflow {described['id']} ({described['kind']}): "
                    f"{described['status']}, {len(steps)} steps", markup=False)
    print_table(
        ["id", "task", "status", "after", "attempts", "finished_at", "result / error"],
        (
            [step.job.id, step.job.task, step.job.status,
             ",".join(map(str, step.depends_on)) or "-", attempts(step.job),
             when(step.job.finished_at or step.job.failed_at), _outcome(step)]
            for step in steps
        ),
        empty="No steps.",
        right=("id", "attempts"),
        clip=("result / error",),
    )


def _outcome(step: WorkflowStep) -> str:
    job = step.job
    if job.status == "succeeded":
        return json.dumps(job.result, ensure_ascii=False)
    if job.status in ("dead", "cancelled", "retrying"):
        return last_line(job.error or job.last_error)
    return "-"


@app.command("cancel")
@connected(json=True)
def cancel_workflow(context: CliContext, workflow_id: WorkflowId) -> None:
    """Cancel the steps that have not started; running ones stop at their next heartbeat."""
    with context.session() as queue:
        counts = queue.cancel_workflow(workflow_id)
    output(context, counts, lambda: typer.echo(
        f"Workflow {workflow_id}: cancelled {counts['cancelled']} step(s) that had not "
        f"started; asked {counts['requested']} running step(s) to stop."
    ))

