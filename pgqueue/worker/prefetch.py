"""How many jobs a worker holds beyond its slots: its prefetch allowance.

Held jobs are ``claimed`` in SQL, not started (worker/ledger.py): a worker with
``concurrency`` slots and an allowance of K has at most ``concurrency`` running rows and
K claimed ones. The allowance is what keeps slots busy while the next claim is on its
way: a slot that frees has a job at hand, started in the statement that records the
outcome of the job before it, instead of a claim to wait for.

``--prefetch K`` fixes it. Without it the allowance follows the work (``auto``): enough
jobs to keep every slot busy for ``HORIZON`` seconds at the jobs' recent duration
(``concurrency * HORIZON / duration``, Little's law), between ``FLOOR`` and ``CEILING``.
Jobs of a few microseconds get hundreds held, and each claim and each batch of outcomes
then carries about a hundred jobs instead of a handful; jobs of a second get one, so a
worker does not sit on jobs that another, idle worker could run. Drains of 20,000
no-op jobs, ``python benchmarks/throughput.py --jobs 20000 --reps 3 --worker-args
'--prefetch K'``, medians in jobs/s: K = 0: 8,206; 8 (the fixed default before): 12,642;
64: 19,898; 256: 30,198; 512: 33,326; measured (no ``--prefetch``): 30,042 to 31,607
in four runs (the machine's noise is about ±10%: 512 gave 30,048 in one of them).

The duration is a moving average over the last few dozen executions, updated as each
ends: it is known after the first jobs of a burst (a count of jobs per second would
need time to build up, and reads jobs ending together as a burst of rate).
"""

from __future__ import annotations

import math

# Seconds of work held ahead: a refill takes the completer's batching interval, its
# write and the next claim (about 3-5 ms on a busy worker), and the places of ended jobs
# stay taken until their outcomes commit. With no-op jobs it is CEILING either way.
HORIZON = 0.020
# Never fewer than one job held ahead, never more than this many.
FLOOR = 1
CEILING = 512
# The weight of each ended execution in the moving average of durations.
WEIGHT = 0.05
# How long a prefetched job may wait for a slot before it goes back to the queue (its
# attempt given back) for another worker to take: the allowance is sized for 20 ms of
# work, so a job still waiting after a second means the slots are held by jobs far
# longer than the recent ones (a few slow jobs among many fast: without this, a worker
# whose slots all run slow jobs would sit on hundreds of fast ones).
PATIENCE = 1.0


class Prefetch:
    """The allowance: ``fixed`` if given (``--prefetch K``), else measured (``auto``)."""

    def __init__(self, fixed: int | None, *, concurrency: int) -> None:
        self.fixed = fixed
        self._concurrency = concurrency
        self._duration: float | None = None  # moving average, seconds

    @property
    def auto(self) -> bool:
        return self.fixed is None

    def ended(self, seconds: float) -> None:
        """An execution ended after running ``seconds`` (whatever its outcome)."""
        if self._duration is None:
            self._duration = seconds
        else:
            self._duration += (seconds - self._duration) * WEIGHT

    def stalled(self, running_for: float) -> None:
        """Prefetched jobs waited ``PATIENCE`` for a slot whose job has been running for
        ``running_for`` seconds: that is the duration to plan with now."""
        self._duration = max(self._duration or 0.0, running_for)

    @property
    def allowance(self) -> int:
        """Jobs the worker may hold beyond its slots, now."""
        if self.fixed is not None:
            return self.fixed
        if self._duration is None:
            return FLOOR  # nothing ended yet: nothing known
        if self._duration <= 0:
            return CEILING
        wanted = math.ceil(self._concurrency * HORIZON / self._duration)
        return min(CEILING, max(FLOOR, wanted))

    @property
    def claim_batch(self) -> int:
        """The fewest free places worth a claim while prefetched jobs still wait to start:
        half the allowance, so that a busy worker claims in large batches and never lets
        its waiting jobs run out. A claim's cost is mostly its own, not its jobs': 380 µs
        of server CPU for 10 jobs, 675 µs for 50 (``benchmarks/claim_cost.py``)."""
        return max(1, self.allowance // 2)
