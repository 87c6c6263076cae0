"""How many jobs a worker holds beyond its slots: its prefetch allowance.

A job holds its place from its claim until its outcome is committed (see
``Worker._free_slots``), so a worker with ``concurrency`` slots and an allowance of K
never shows more than ``concurrency + K`` running rows in SQL. The allowance is what
keeps slots busy while the next claim and the last outcomes are on their way: a slot
that frees has a job waiting for it instead of a round trip to make.

``--prefetch K`` fixes it. Without it the allowance follows the work (``auto``): as many
jobs as the worker ends in ``HORIZON`` seconds at its recent rate, between ``FLOOR`` and
``CEILING``. Jobs of a few microseconds get hundreds held, and each claim and each batch
of outcomes then carries about a hundred jobs instead of a handful; jobs of a second get
one, so a worker does not sit on jobs that another, idle worker could run. Drains of
20,000 no-op jobs, ``python benchmarks/throughput.py --jobs 20000 --reps 3
--worker-args '--prefetch K'``, medians in jobs/s: K = 0: 8,206; 8 (the fixed default
before): 12,642; 64: 19,898; 256: 30,198; 512: 33,326; measured (no ``--prefetch``):
32,547 and 33,611 in two runs.

The rate is a count of ended executions that decays with a time constant of ``TAU``
seconds, read when the producer asks: nothing is computed per job but one increment.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

# Seconds of work held ahead: a refill takes the completer's batching interval, its
# write and the next claim (about 3-5 ms on a busy worker), and the places of ended jobs
# stay taken until their outcomes commit. 10 ms measured 29,329 / 30,339 jobs/s on the
# drain above, 20 ms 31,595 / 32,547 / 33,611.
HORIZON = 0.020
# Never fewer than one job held ahead, never more than this many.
FLOOR = 1
CEILING = 512
# How fast the measured rate forgets (seconds): short enough that the allowance grows
# within the first tens of milliseconds of a burst. The drain above measured 28,055 /
# 29,329 jobs/s with 0.1 s and 29,824 / 32,132 with 0.03 s (HORIZON 10 ms); at that
# rate 30 ms still holds about a thousand ended jobs to count.
TAU = 0.03


class Prefetch:
    """The allowance: ``fixed`` if given (``--prefetch K``), else measured (``auto``)."""

    def __init__(self, fixed: int | None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.fixed = fixed
        self._clock = clock
        self._ended = 0  # since the last reading
        self._decayed = 0.0  # ended executions, each weighted by exp(-age / TAU)
        self._read_at = clock()

    @property
    def auto(self) -> bool:
        return self.fixed is None

    def ended(self) -> None:
        """One execution ended (whatever its outcome)."""
        self._ended += 1

    @property
    def allowance(self) -> int:
        """Jobs the worker may hold beyond its slots, now."""
        if self.fixed is not None:
            return self.fixed
        now = self._clock()
        elapsed = now - self._read_at
        if elapsed > 0 or self._ended:
            self._decayed = self._decayed * math.exp(-elapsed / TAU) + self._ended
            self._ended = 0
            self._read_at = now
        # In a steady stream of r jobs/s the decayed count tends to r * TAU.
        wanted = math.ceil(self._decayed / TAU * HORIZON)
        return min(CEILING, max(FLOOR, wanted))

    @property
    def claim_batch(self) -> int:
        """The fewest free places worth a claim while prefetched jobs still wait to start:
        half the allowance, so that a busy worker claims in large batches and never lets
        its waiting jobs run out. A claim's cost is mostly its own, not its jobs': 390 µs
        of server CPU for 10 jobs, 800 µs for 100 (``benchmarks/claim_cost.py``)."""
        return max(1, self.allowance // 2)
