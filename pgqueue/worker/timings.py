"""Every timing of the lease rules and of shutdown, in one place (the docs cite this file).

A lease is how long a worker may hold a running job without proving it is alive; the
SQL that sets, extends and takes back leases is in ``pgqueue/db/queries.py`` (the
claims, ``heartbeat``, ``rescue_expired_jobs``). What follows is when those statements
run, and the bounds on a stopping worker. The defaults of :class:`WorkerSettings` are
the ``DEFAULT_*`` values here.

With the defaults, a job held by a worker that died is back in the queue at most
``lease + rescue_interval * (1 + MAINTENANCE_JITTER)`` after the worker's last heartbeat
(31.2 s), inside the contract's "lease + 5 s".
"""

from __future__ import annotations

from typing import Final

# -- The lease -------------------------------------------------------------------------------
# How long a claim (and each heartbeat) holds a job. Long enough to ride out a heartbeat
# or two lost to a network blip; short enough that a dead worker's jobs come back soon.
DEFAULT_LEASE: Final = 30.0
# The shortest lease a worker accepts: below one second a heartbeat (every third of the
# lease) would have to succeed every few hundred milliseconds, and one slow statement
# would lose every job.
LEASE_FLOOR: Final = 1.0

# -- Heartbeats --------------------------------------------------------------------------------
# Three heartbeats per lease: two may fail in a row before a lease lapses.
HEARTBEATS_PER_LEASE: Final = 3
# A failed heartbeat is retried after a jittered delay starting here ...
HEARTBEAT_RETRY_BASE: Final = 0.2
# ... and growing to at most this, or the heartbeat interval if shorter.
HEARTBEAT_RETRY_CAP: Final = 5.0


def heartbeat_interval(lease: float) -> float:
    """Seconds between heartbeats for ``lease``."""
    return lease / HEARTBEATS_PER_LEASE


def claims_allowed_for(lease: float) -> float:
    """How long after its last successful heartbeat a worker may still claim jobs.

    One heartbeat interval short of the lease: the worker stops claiming *before* the
    leases it holds can expire, since it could not promise to keep new ones.
    """
    return lease - heartbeat_interval(lease)


# -- Rescue, pruning, stale workers -----------------------------------------------------------
# Every worker runs the rescuer on this timer (no leader; SKIP LOCKED splits the rows),
# so an expired lease is taken back within one interval of expiring.
DEFAULT_RESCUE_INTERVAL: Final = 1.0
# Each sweep waits the interval times a random factor in [1 - jitter, 1 + jitter], so
# many workers started together do not sweep in lockstep.
MAINTENANCE_JITTER: Final = 0.2
# Finished rows past their result_ttl are deleted within this long.
DEFAULT_PRUNE_INTERVAL: Final = 30.0
# A workers row is deleted this long after its own lease ran out (a worker that stopped
# heartbeating); the grace keeps a worker that is merely slow from flickering.
STALE_WORKER_GRACE: Final = 10.0

# -- Periodic jobs (worker/scheduler.py) ------------------------------------------------------
# A scheduler sleeps until the next tick, or until a NOTIFY says the schedules changed;
# it also reads the table this often in case a notification was lost (a worker without
# a listener reads it every poll interval instead).
SCHEDULE_RECHECK: Final = 60.0

# -- Shutdown ------------------------------------------------------------------------------------
# How long a stopping worker waits for a claim in flight to return (then it cancels it;
# its jobs, if it committed, come back when their lease expires).
PRODUCER_STOP_WAIT: Final = 1.0
# How long a stopping worker lets running jobs finish before it releases them.
DEFAULT_SHUTDOWN_TIMEOUT: Final = 30.0
# After releasing them: how long it waits for their tasks to acknowledge cancellation
# (async code that swallows it is released anyway).
RELEASE_WAIT: Final = 1.0
# The bound on a stop, beyond shutdown_timeout, while the database is reachable: the
# release wait, writing the last outcomes, removing the worker row, and a last moment for
# leftover tasks (LEFTOVER_GRACE), which are then abandoned (async code that swallows its
# cancellation would otherwise keep the event loop, and the process, alive forever).
# tests/e2e/test_worker_containment.py measures it.
SHUTDOWN_GRACE: Final = 3.0
# How long an async task's coroutine may take to acknowledge its cancellation (at its
# timeout, a stop or a lost lease) before the attempt ends without it.
ABANDON_AFTER: Final = 1.0
LEFTOVER_GRACE: Final = 0.5
# How long shutdown keeps trying to record outcomes while the database is unreachable;
# after that the leases (no longer renewed) hand the jobs to other workers.
FINAL_FLUSH: Final = 15.0
# How long removing the worker's row may take before the worker exits without it (the
# row then expires: STALE_WORKER_GRACE after its lease).
DEREGISTER_TIMEOUT: Final = 5.0

# A new worker connection's first statement (its session settings, or SELECT 1) must end
# within this, else the connection counts as failed and its service retries, with a
# warning: a pooler in session mode with too few server connections accepts logins and
# then holds statements silently until its own timeout (PgBouncer's query_wait_timeout,
# 120 s by default). worker/connections.py.
SERVER_WAIT: Final = 10.0

# How long a claim, a batch of outcomes or a heartbeat may go without an answer before its
# service gives up on the connection and reconnects, with a warning. A statement that
# never returns and never fails (a pooler that stopped forwarding, a peer that accepts
# and stays silent, a lock held by a forgotten transaction) would otherwise stall the
# worker in silence: its heartbeat renewing the leases of jobs that never finish.
# Longer than any of these statements takes in health (milliseconds), shorter than the
# default lease.
STALL_TIMEOUT: Final = 20.0
