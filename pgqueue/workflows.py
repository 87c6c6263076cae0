"""Workflows: chains, groups, chords and general graphs of jobs.

``task.s(*args, **kwargs)`` is a :class:`TaskSignature`: a job not yet enqueued. They
compose into :class:`chain`, :class:`group` and :class:`chord`, which compile to the
general form, :class:`Workflow` (steps added with ``after=[...]`` dependencies). Because a
step can only depend on steps added before it, a workflow cannot hold a cycle or an
unknown dependency: both are refused when the step is added.

``enqueue()`` writes the whole graph in one statement (``queries.insert_workflow``),
inside the caller's transaction when ``conn=`` is given. From there the database runs it:
the triggers of revision ``0007_workflows`` release a step's successors in the
transaction that records its success, stop everything downstream of a step that died
and cancel everything downstream of a cancelled one. No worker coordinates anything.

What a step receives: ``inputs="none"`` (the default of :meth:`Workflow.add`) nothing
more than its own arguments; ``"result"`` its one predecessor's result in front of them;
``"results"`` the list of its predecessors' results, in ``after`` order. A chain passes
``"result"`` from step to step (``"results"`` after a group), a chord passes
``"results"`` to its callback: the Celery canvas, with the same argument order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal

import psycopg

from pgqueue import tracing
from pgqueue.arguments import EncodedArguments
from pgqueue.db.plans import Plan, Row, Statement
from pgqueue.db.queries import Queries
from pgqueue.errors import ArgumentError, ConfigurationError, DuplicateJob, JobNotFound
from pgqueue.job import Job
from pgqueue.options import ENQUEUE_OPTIONS, JobOptions
from pgqueue.serialization import dumps, loads

if TYPE_CHECKING:
    from pgqueue.queue import Queue
    from pgqueue.task import Task

__all__ = [
    "Canvas", "Step", "TaskSignature", "Workflow", "WorkflowHandle", "WorkflowStep",
    "chain", "chord", "group",
]

Inputs = Literal["none", "result", "results"]
INPUTS: Final = ("none", "result", "results")
# The largest workflow one enqueue writes: its steps travel as one JSON parameter.
MAX_STEPS: Final = 100_000


@dataclass(frozen=True)
class TaskSignature:
    """A task with its arguments and job options, not enqueued: ``task.s(...)``.

    Arguments are checked against the task's signature when the signature becomes a
    step of a workflow (then it is known whether a predecessor's result comes first).
    """

    task: Task[Any, Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: JobOptions = field(default_factory=JobOptions)

    def __repr__(self) -> str:
        return f"{self.task.name}.s(*{list(self.args)!r}, **{self.kwargs!r})"

    def using(self, **options: Any) -> TaskSignature:
        """This signature with job options (as ``task.using``, without ``conn``: a
        workflow's connection is given to its ``enqueue``)."""
        if "conn" in options:
            raise ConfigurationError(
                "conn= is given to the workflow's enqueue(conn=...), not to one step"
            )
        return replace(self, options=self.options.with_options(options, ENQUEUE_OPTIONS))


@dataclass(frozen=True)
class Step:
    """A step added to a :class:`Workflow`; what ``after=[...]`` names."""

    workflow: Workflow = field(repr=False, compare=False)
    index: int  # 0-based, in the order the steps were added

    def __repr__(self) -> str:
        return f"<Step {self.index} of a Workflow>"


@dataclass(frozen=True)
class _Node:
    signature: TaskSignature
    after: tuple[int, ...]
    inputs: Inputs
    encoded: EncodedArguments  # checked and serialised once, by Workflow.add


class Workflow:
    """A graph of steps; each runs once every step it comes ``after`` has succeeded.

    >>> wf = Workflow()
    >>> a = wf.add(fetch.s(1)); b = wf.add(fetch.s(2))
    >>> wf.add(merge.s(), after=[a, b], inputs="results")
    >>> handle = wf.enqueue(conn=conn)

    ``wait()`` on the handle returns the result of the step no other step comes after, or
    the list of those steps' results (in the order they were added) when there are several.
    """

    def __init__(self) -> None:
        self._nodes: list[_Node] = []
        self._kind = "workflow"
        self._outputs: list[int] | None = None  # None: the steps nothing comes after
        self._returns_list: bool | None = None

    def __repr__(self) -> str:
        return f"<Workflow of {len(self._nodes)} steps>"

    def __len__(self) -> int:
        return len(self._nodes)

    def add(
        self, signature: TaskSignature, *, after: Sequence[Step] = (),
        inputs: Inputs = "none",
    ) -> Step:
        """Add a step running ``signature`` once the ``after`` steps have succeeded.

        ``inputs``: what it receives in front of its own arguments — ``"none"``,
        ``"result"`` (the result of its one ``after`` step) or ``"results"`` (the list of
        the ``after`` steps' results, in that order).
        """
        if not isinstance(signature, TaskSignature):
            raise ConfigurationError(
                f"Workflow.add takes a task signature such as my_task.s(1, 2), not "
                f"{type(signature).__name__}; add chains, groups and chords with their "
                f"own enqueue()"
            )
        if inputs not in INPUTS:
            raise ConfigurationError(
                f"invalid inputs {inputs!r}: use 'none', 'result' (the one step it comes "
                f"after) or 'results' (the list of the steps it comes after)"
            )
        parents: list[int] = []
        for step in after:
            if not isinstance(step, Step) or step.workflow is not self:
                raise ConfigurationError(
                    f"after= names {step!r}, which is not a step added to this workflow "
                    f"before: use the values wf.add() returned"
                )
            if step.index in parents:
                raise ConfigurationError(f"after= names step {step.index} twice")
            parents.append(step.index)
        if inputs == "result" and len(parents) != 1:
            raise ConfigurationError(
                f"inputs='result' passes the result of exactly one step; this one comes "
                f"after {len(parents)}: use inputs='results' for a list"
            )
        if inputs == "results" and not parents:
            raise ConfigurationError("inputs='results' needs the steps in after=[...]")
        if self._nodes and signature.task.queue is not self._nodes[0].signature.task.queue:
            raise ConfigurationError(
                f"task {signature.task.name!r} belongs to another Queue than this "
                f"workflow's first step: a workflow lives in one database and schema"
            )
        if len(self._nodes) >= MAX_STEPS:
            raise ConfigurationError(f"a workflow holds at most {MAX_STEPS} steps")
        # Checked now, where the mistake is, not when the step runs; kept for enqueue().
        encoded = signature.task.signature.encode(
            signature.args, signature.kwargs, leading=0 if inputs == "none" else 1
        )
        self._nodes.append(_Node(signature, tuple(parents), inputs, encoded))
        return Step(self, len(self._nodes) - 1)

    # -- enqueueing ----------------------------------------------------------------------

    def _queue(self) -> Queue:
        if not self._nodes:
            raise ConfigurationError("this workflow has no steps: add some before enqueue()")
        return self._nodes[0].signature.task.queue

    def _params(self, queries: Queries) -> dict[str, Any]:
        steps: list[dict[str, Any]] = []
        keys: list[str] = []
        # Every step continues the enqueuer's trace (pgqueue/tracing.py).
        carrier = tracing.current_carrier() if tracing.ENABLED else None
        for node in self._nodes:
            sig, options, encoded = node.signature, node.signature.options, node.encoded
            if options.idempotency_key is not None:
                if options.idempotency_key in keys:
                    raise ConfigurationError(
                        f"idempotency key {options.idempotency_key!r} is given to two steps "
                        f"of this workflow: a key names one job"
                    )
                keys.append(options.idempotency_key)
            steps.append({
                "task": sig.task.name, "args": loads(encoded.args),
                "kwargs": loads(encoded.kwargs), "queue": options.queue,
                "priority": options.priority,
                "run_at": None if options.run_at is None else options.run_at.isoformat(),
                "run_in": options.run_in, "max_attempts": options.max_attempts,
                "idempotency_key": options.idempotency_key,
                "meta": _traced(loads(options.meta), carrier),
                "timeout": options.timeout, "result_ttl": options.result_ttl,
                "waits_for": len(node.after),
            })
        edges = [
            [parent + 1, child + 1, position, node.inputs]
            for child, node in enumerate(self._nodes)
            for position, parent in enumerate(node.after)
        ]
        outputs = self._outputs if self._outputs is not None else self._sinks()
        returns_list = (self._returns_list if self._returns_list is not None
                        else len(outputs) > 1)
        return {
            "jobs_table": queries.jobs_table, "steps": dumps(steps), "edges": dumps(edges),
            "keys": keys, "kind": self._kind, "outputs": [i + 1 for i in outputs],
            "returns_list": returns_list,
        }

    def _sinks(self) -> list[int]:
        """The steps no other step comes after, in the order they were added."""
        parents = {parent for node in self._nodes for parent in node.after}
        return [i for i in range(len(self._nodes)) if i not in parents]

    def enqueue(self, *, conn: object | None = None) -> WorkflowHandle:
        """Insert every step in one statement (in ``conn``'s transaction when given)."""
        queue = self._queue()
        params = self._params(queue.queries)
        for attempt in _KEY_RACE_TRIES:
            try:
                row = queue.run_plan(insert_workflow(queue.queries, params), conn=conn)
                return WorkflowHandle.from_row(row, queue)
            except psycopg.errors.UniqueViolation:
                if not params["keys"]:
                    raise
                _lost_key_race(params, conn, attempt)
        raise AssertionError("unreachable")  # _lost_key_race raised on the last attempt

    async def enqueue_async(self, *, conn: object | None = None) -> WorkflowHandle:
        """Async :meth:`enqueue`."""
        queue = self._queue()
        params = self._params(queue.queries)
        for attempt in _KEY_RACE_TRIES:
            try:
                row = await queue.run_plan_async(insert_workflow(queue.queries, params),
                                                 conn=conn)
                return WorkflowHandle.from_row(row, queue)
            except psycopg.errors.UniqueViolation:
                if not params["keys"]:
                    raise
                _lost_key_race(params, conn, attempt)
        raise AssertionError("unreachable")


# A concurrent transaction inserted a job with one of the workflow's idempotency keys
# between our statement's check and its insert: on our own connection, the next try
# sees that job and returns its workflow; in the caller's transaction (now aborted),
# the caller must enqueue again.
_KEY_RACE_TRIES = range(3)


def _lost_key_race(params: dict[str, Any], conn: object | None, attempt: int) -> None:
    if conn is not None or attempt == _KEY_RACE_TRIES[-1]:
        raise DuplicateJob(
            f"another transaction enqueued a job with one of this workflow's idempotency "
            f"keys ({', '.join(map(repr, params['keys']))}) at the same moment; enqueue "
            f"the workflow again (it then returns the workflow holding the key)"
        ) from None


# -- The canvas: chain, group, chord -----------------------------------------------------


class Canvas:
    """What chain, group and chord share: they compile to a :class:`Workflow`."""

    kind = "workflow"

    def _place(self, wf: Workflow, after: list[Step], inputs: Inputs) -> list[Step]:
        """Add this item's steps to ``wf`` after ``after`` (receiving ``inputs``); return
        the steps whose results come out of it."""
        raise NotImplementedError

    @property
    def _returns_list(self) -> bool:
        raise NotImplementedError

    def workflow(self) -> Workflow:
        """The general form this compiles to."""
        wf = Workflow()
        outputs = self._place(wf, [], "none")
        wf._kind = self.kind
        wf._outputs = [step.index for step in outputs]
        wf._returns_list = self._returns_list
        return wf

    def enqueue(self, *, conn: object | None = None) -> WorkflowHandle:
        """Insert every step in one statement (in ``conn``'s transaction when given)."""
        return self.workflow().enqueue(conn=conn)

    async def enqueue_async(self, *, conn: object | None = None) -> WorkflowHandle:
        """Async :meth:`enqueue`."""
        return await self.workflow().enqueue_async(conn=conn)


def _place(item: TaskSignature | Canvas, wf: Workflow, after: list[Step],
           inputs: Inputs) -> list[Step]:
    if isinstance(item, Canvas):
        return item._place(wf, after, inputs)
    return [wf.add(item, after=after, inputs=inputs if after else "none")]


def _returns_list(item: TaskSignature | Canvas) -> bool:
    return isinstance(item, Canvas) and item._returns_list


def _items(kind: str, items: Iterable[Any]) -> tuple[TaskSignature | Canvas, ...]:
    listed = tuple(items)
    if not listed:
        raise ConfigurationError(f"a {kind} needs at least one task signature, e.g. "
                                 f"{kind}(task.s(1), task.s(2))")
    for item in listed:
        if not isinstance(item, TaskSignature | Canvas):
            raise ConfigurationError(
                f"a {kind} takes task signatures (my_task.s(...)), chains, groups and "
                f"chords, not {type(item).__name__} {item!r}"
            )
    return listed


class chain(Canvas):
    """Steps one after the other; each receives the previous one's result as its first
    argument (the list of results after a group). ``wait()`` returns the last one's."""

    kind = "chain"

    def __init__(self, *items: TaskSignature | Canvas) -> None:
        self.items = _items("chain", items)

    def __repr__(self) -> str:
        return f"chain({', '.join(map(repr, self.items))})"

    def _place(self, wf: Workflow, after: list[Step], inputs: Inputs) -> list[Step]:
        for item in self.items:
            after = _place(item, wf, after, inputs)
            inputs = "result" if len(after) == 1 else "results"
        return after

    @property
    def _returns_list(self) -> bool:
        return _returns_list(self.items[-1])


class group(Canvas):
    """Steps that run in parallel; ``wait()`` returns the list of their results, in
    the order given."""

    kind = "group"

    def __init__(self, *items: TaskSignature | Canvas) -> None:
        self.items = _items("group", items)

    def __repr__(self) -> str:
        return f"group({', '.join(map(repr, self.items))})"

    def _place(self, wf: Workflow, after: list[Step], inputs: Inputs) -> list[Step]:
        outputs: list[Step] = []
        for item in self.items:
            outputs.extend(_place(item, wf, after, inputs))
        return outputs

    @property
    def _returns_list(self) -> bool:
        return True


class chord(Canvas):
    """A group, then a callback that receives the list of the group's results (in group
    order) once every member has succeeded. ``wait()`` returns the callback's result."""

    kind = "chord"

    def __init__(self, header: group | Iterable[TaskSignature | Canvas],
                 callback: TaskSignature | Canvas) -> None:
        self.header = header if isinstance(header, group) else group(*header)
        self.callback = _items("chord callback", [callback])[0]

    def __repr__(self) -> str:
        return f"chord({self.header!r}, {self.callback!r})"

    def _place(self, wf: Workflow, after: list[Step], inputs: Inputs) -> list[Step]:
        members = self.header._place(wf, after, inputs)
        return _place(self.callback, wf, members, "results")

    @property
    def _returns_list(self) -> bool:
        return _returns_list(self.callback)


# -- Following an enqueued workflow ------------------------------------------------------


@dataclass
class WorkflowStep:
    """One step of an enqueued workflow: its job, and the steps it waits for."""

    job: Job
    depends_on: list[int]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the job's columns and ``status``, plus ``depends_on``."""
        return self.job.to_dict() | {"depends_on": self.depends_on}


@dataclass
class WorkflowHandle:
    """An enqueued workflow: its id (the id of its first step) and how to follow it."""

    id: int
    kind: str
    job_ids: list[int]  # every step's job id, in the order the steps were added
    outputs: list[int]  # the steps whose results wait() returns
    returns_list: bool
    _queue: Queue = field(repr=False, compare=False)

    @classmethod
    def from_row(cls, row: Row, queue: Queue) -> WorkflowHandle:
        """From insert_workflow's or select_workflow's row."""
        return cls(id=row["id"], kind=row["kind"], job_ids=row.get("ids") or [],
                   outputs=list(row["outputs"]), returns_list=row["returns_list"],
                   _queue=queue)

    def steps(self) -> list[WorkflowStep]:
        """Every step's job as it is now, live or dead, in id order."""
        rows = self._queue.run_plan(workflow_steps(self._queue.queries, self.id))
        return [WorkflowStep(Job.from_row(row, self._queue), list(row["depends_on"]))
                for row in rows]

    def describe(self, steps: list[WorkflowStep] | None = None) -> dict[str, Any]:
        """JSON-ready: the workflow and every step (``steps``, or as they are now):
        ``{id, kind, outputs, returns_list, status, steps: [...]}``, where ``status``
        sums the steps up (see :func:`overall_status`). ``pgq workflows show --json``."""
        if steps is None:
            steps = self.steps()
        return {
            "id": self.id, "kind": self.kind, "outputs": self.outputs,
            "returns_list": self.returns_list,
            "status": overall_status([step.job.status for step in steps]),
            "steps": [step.to_dict() for step in steps],
        }

    def _deadline(self, timeout: float | None) -> float | None:
        return None if timeout is None else time.monotonic() + timeout

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _output_job(self, job_id: int) -> Job:
        return Job(id=job_id, queue="", task="", args=[], kwargs={}, status="",
                   _queue=self._queue)

    def wait(self, timeout: float | None = None, poll_interval: float = 0.05) -> Any:
        """Block until the outputs have finished; return the result (a chain's last
        step's, a chord's callback's) or the list of results (a group's).

        Raises :class:`~pgqueue.JobFailed` when an output died — for a step stopped by an
        earlier one, its error names that step — and :class:`TimeoutError`.
        """
        deadline = self._deadline(timeout)
        results = [self._output_job(job_id).wait(self._left(deadline), poll_interval)
                   for job_id in self.outputs]
        return results if self.returns_list else results[0]

    async def wait_async(self, timeout: float | None = None,
                         poll_interval: float = 0.05) -> Any:
        """Async :meth:`wait`."""
        deadline = self._deadline(timeout)
        results = []
        for job_id in self.outputs:
            results.append(await self._output_job(job_id).wait_async(
                self._left(deadline), poll_interval))
            await asyncio.sleep(0)
        return results if self.returns_list else results[0]

    def cancel(self) -> dict[str, int]:
        """Cancel every step that has not started and ask the running ones to stop;
        returns ``{"cancelled": n, "requested": m}``."""
        return self._queue.run_plan(cancel_workflow(self._queue.queries, self.id))


def overall_status(statuses: Sequence[str]) -> str:
    """One word for a workflow from its steps' API statuses: ``dead`` if a step is dead,
    else ``cancelled`` if one was cancelled, ``succeeded`` when all succeeded,
    ``running`` while a step runs, else ``queued`` (steps wait, queued or scheduled)."""
    present = set(statuses)
    for status in ("dead", "cancelled"):
        if status in present:
            return status
    if present <= {"succeeded"}:
        return "succeeded"
    return "running" if "running" in present else "queued"


# -- Plans (see db.plans) ------------------------------------------------------------------


def insert_workflow(queries: Queries, params: dict[str, Any]) -> Plan[Row]:
    """Insert a workflow; its row (``id``, ``ids``, ``kind``, ``outputs``, ...), or the
    row of the workflow holding one of its steps' idempotency keys."""
    row = yield Statement(queries.insert_workflow, params)
    if row["workflow_id"] is not None:
        outputs = [row["ids"][i - 1] for i in params["outputs"]]
        return {"id": row["workflow_id"], "ids": row["ids"], "kind": params["kind"],
                "outputs": outputs, "returns_list": params["returns_list"]}
    if row["held_workflow_id"] is None:
        raise ArgumentError(
            f"an idempotency key of this workflow is held by job {row['held_job_id']}, "
            f"which is not a workflow step: change the key, or wait for that job to finish"
        )
    held = yield from get_workflow(queries, row["held_workflow_id"])
    if held is None:  # the holder's workflow row went with its last step meanwhile
        raise JobNotFound(f"workflow {row['held_workflow_id']} holding the key is gone")
    return held


def get_workflow(queries: Queries, workflow_id: int) -> Plan[Row | None]:
    """A workflow's row with the ids of its steps, or None."""
    row = yield Statement(queries.select_workflow, {"id": workflow_id})
    if row is None:
        return None
    steps = yield from workflow_steps(queries, workflow_id)
    return dict(row) | {"ids": [step["id"] for step in steps]}


def workflow_steps(queries: Queries, workflow_id: int) -> Plan[list[Row]]:
    """Every step of a workflow, live or dead, with ``depends_on``; in id order."""
    rows = yield Statement(queries.select_workflow_steps, {"id": workflow_id}, fetch="all")
    return rows  # type: ignore[no-any-return]


def cancel_workflow(queries: Queries, workflow_id: int) -> Plan[dict[str, int]]:
    """Cancel a workflow's steps that have not started; ask its running ones to stop."""
    exists = yield Statement(queries.select_workflow, {"id": workflow_id})
    if exists is None:
        raise JobNotFound(f"no workflow with id {workflow_id}")
    row = yield Statement(queries.cancel_workflow_steps, {"id": workflow_id})
    return {"cancelled": int(row["cancelled"]), "requested": int(row["requested"])}


def _traced(meta: dict[str, Any], carrier: dict[str, str] | None) -> dict[str, Any]:
    """A step's meta with the enqueuer's trace context (``meta["otel"]``), unless there is
    none or the step's meta gives its own."""
    if carrier is not None and tracing.META_KEY not in meta:
        meta[tracing.META_KEY] = carrier
    return meta
