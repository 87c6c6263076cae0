"""What became of a claimed job: the value the executor returns and the completer writes.

The executor turns a :class:`~pgqueue.db.queries.ClaimedJob` (a row of the claim) into
an :class:`Outcome`; only the completer writes outcomes to the database. Both are plain
frozen values, easy to test alone.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pgqueue.db.queries import ClaimedJob

OutcomeKind = Literal[
    "succeeded",  # finished: result stored, kept until result_ttl
    "result",  # the job was already marked succeeded by ctx.transaction(); store the value
    "retry",  # failed or Retry(): back to queued after `delay`, the attempt is used up
    "snooze",  # Snooze(): back to queued after `delay`, the attempt is given back
    "release",  # shutdown: back to queued now, the attempt is given back
    "cancelled",  # cancelled while running
    "progress",  # ctx.set_progress(): meta only, the job keeps running
    "dead",  # attempts exhausted, Discard(), unknown task: moved to dead_jobs
    "unclaim",  # a held job that never started: back to queued as it was claimed
]


class Outcome(NamedTuple):
    """What the completer must record for one claim (job id + lease token).

    A named tuple (``outcome._replace(...)`` makes a changed copy): one is built per
    job, and a frozen dataclass's ``__init__`` took 1.2 µs of it."""

    job_id: int
    attempt: int  # for messages; the token is the fence
    token: int
    kind: OutcomeKind
    result: str | None = None  # JSON text
    error: str | None = None
    delay: float = 0.0
    progress: str | None = None  # JSON text for meta.progress
    task: str = ""
    queue: str = ""  # for per-queue slots (Worker._held)
    in_workflow: bool = False  # see Completer._write
    # Limits (pgqueue/limits.py): claimed under a limit (its end wakes the workers),
    # units reported by ctx.charge(), and a RateLimited pause: seconds and optional key.
    limited: bool = False
    charged: float | None = None
    pause: float | None = None
    pause_key: str | None = None

    @classmethod
    def of(cls, job: ClaimedJob, kind: OutcomeKind, result: str | None = None, *,
           error: str | None = None, delay: float = 0.0, progress: str | None = None) -> Outcome:
        """The outcome ``kind`` of this claim of ``job``."""
        return cls(job.id, job.attempt, job.token, kind, result, error, delay, progress,
                   job.task, job.queue, job.workflow_id is not None, job.limited)

    @property
    def touches_limits(self) -> bool:
        """True if recording it also changes limit state (queries.apply_limit_outcomes)."""
        return self.charged is not None or self.pause is not None

    @property
    def key(self) -> tuple[int, int]:
        """Identifies the claim: one pending outcome per key."""
        return (self.job_id, self.token)

    @property
    def final(self) -> bool:
        """True if this outcome ends the claim (everything but progress)."""
        return self.kind != "progress"

    @property
    def holds_slot(self) -> bool:
        """True if the job held a slot until this outcome is committed: it ends an
        attempt that started (an unclaimed job never had one)."""
        return self.kind not in ("progress", "unclaim")

    def merged_with_progress(self, progress: str | None) -> Outcome:
        """This outcome carrying a progress value reported earlier in the same batch."""
        if progress is None or self.progress is not None:
            return self
        return self._replace(progress=progress)
