"""Limits across the cluster with real worker processes.

Three ``pgq worker`` processes claim from one database while the test reads
``pgqueue.jobs`` every 50 ms: ``status = 'running'`` is the truth for concurrency (a job
holds its slot from its claim until its outcome is committed), and ``started_at`` (the
claim's ``now()``) is the truth for rate limits. The tasks also append one line per start
and per end to a file in the workers' directory, so that overlaps and starts are counted
exactly, not only at the sampler's instants.

The tasks are in this module: the workers import it as
``-A tests.e2e.test_limits_workers:q`` (the repository is on their ``PYTHONPATH``), the
test enqueues through the same Queue pointed at its database.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from pgqueue import JobContext, Queue, RateLimited
from tests._polling import wait_until
from tests.e2e._chaos import Processes, WorkerProcess, query, scalar
from tests.e2e._pgq import ok

q = Queue()
APP = "tests.e2e.test_limits_workers:q"
WORKERS = 3
# One line per start and per end of a task, in the worker's current directory (the
# test's Processes directory): "<event> <job id> <time.time()> <pid>".
RUNS = "limits-runs.log"
SAMPLE_EVERY = 0.05


# -- The tasks (run by the workers) ---------------------------------------------------------


def _record(event: str, ctx: JobContext) -> None:
    """Append one line; a single write(2) with O_APPEND, atomic across processes."""
    line = f"{event} {ctx.job.id} {time.time():.6f} {os.getpid()}\n".encode()
    fd = os.open(RUNS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _first_time(marker: str) -> bool:
    """True for exactly one caller across every worker process (an exclusive create)."""
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    return True


@q.task(name="limits.work")
async def work(seconds: float, ctx: JobContext) -> None:
    """Holds its slot for ``seconds``."""
    _record("start", ctx)
    await asyncio.sleep(seconds)
    _record("end", ctx)


@q.task(name="limits.hold_first_attempt")
async def hold_first_attempt(seconds: float, ctx: JobContext) -> int:
    """Holds its slot for ``seconds`` on attempt 1 (the test kills its worker then)."""
    _record("start", ctx)
    if ctx.attempt == 1:
        await asyncio.sleep(seconds)
    _record("end", ctx)
    return ctx.attempt


@q.task(name="limits.rated", rate_limit="5/s")
async def rated(n: int, ctx: JobContext) -> int:
    """A task with its own rate limit (declared by the workers when they start)."""
    _record("start", ctx)
    return n


@q.task(name="limits.charged")
def charged(ctx: JobContext) -> dict[str, int]:
    """Estimated at 200 units when enqueued; reports what it really used, 100 to 300."""
    _record("start", ctx)
    units = random.randint(100, 300)
    ctx.charge(units)
    return {"units": units}


@q.task(name="limits.call_api")
async def call_api(account: str, ctx: JobContext) -> int:
    """A call to a rate-limited API: account A's first call gets a 429 (Retry-After 3)."""
    _record("start", ctx)
    if account == "A" and _first_time("429-A"):
        _record("429", ctx)
        raise RateLimited(retry_after=3.0, key="acct:A")
    await asyncio.sleep(0.1)
    _record("end", ctx)
    return ctx.attempt


# -- Helpers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def limits_app(dsn: str) -> Iterator[Queue]:
    """This module's Queue pointed at ``dsn``, for enqueueing from the test."""
    q.configure(dsn=dsn)
    try:
        yield q
    finally:
        q.close()


def start_workers(processes: Processes, dsn: str, count: int = WORKERS, **options: Any
                  ) -> list[WorkerProcess]:
    return [processes.start_worker(dsn, app=APP, **options) for _ in range(count)]


class Sampler(threading.Thread):
    """Runs ``statement`` (rows of ``(group, count)``) every 50 ms until stopped; keeps
    the highest count seen per group. Each read is one snapshot: what an operator's
    query would have seen at that instant."""

    def __init__(self, dsn: str, statement: str, params: Sequence[Any] = ()) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.statement = statement
        self.params = params
        self.highest: dict[str, int] = {}
        self.samples = 0
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self._stop_event.wait(SAMPLE_EVERY):
                    rows = conn.execute(self.statement, self.params).fetchall()
                    self.samples += 1
                    for group, count in rows:
                        key = str(group)
                        self.highest[key] = max(self.highest.get(key, 0), int(count))
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)
        assert self.error is None, f"the sampler failed: {self.error!r}"


@contextlib.contextmanager
def sampling(dsn: str, statement: str, params: Sequence[Any] = ()) -> Iterator[Sampler]:
    sampler = Sampler(dsn, statement, params)
    sampler.start()
    try:
        yield sampler
    finally:
        sampler.stop()


RUNNING_IN_QUEUE = ("SELECT 'all', count(*) FROM pgqueue.jobs "
                    "WHERE status = 'running' AND queue = %s")
RUNNING_PER_KEY = ("SELECT concurrency_key, count(*) FROM pgqueue.jobs "
                   "WHERE status = 'running' AND queue = %s GROUP BY concurrency_key")


def runs(directory: Path) -> list[tuple[str, int, float]]:
    """Every ``(event, job id, time)`` the tasks recorded, in time order."""
    path = directory / RUNS
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        event, job_id, at, _pid = line.split()
        events.append((event, int(job_id), float(at)))
    return sorted(events, key=lambda e: e[2])


def most_at_once(events: Sequence[tuple[str, int, float]], jobs: set[int] | None = None) -> int:
    """The most executions in progress at one instant, among ``jobs`` (default all).

    An execution (its task's start to its end) lies within the job's running status
    (claim to committed outcome), so this never exceeds what SQL would have shown: it is
    an exact lower bound of the running rows, not a sample.
    """
    current = highest = 0
    for event, job_id, _ in events:
        if jobs is not None and job_id not in jobs:
            continue
        if event == "start":
            current += 1
            highest = max(highest, current)
        elif event == "end":
            current -= 1
    return highest


def succeeded(dsn: str, queue: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE queue = %s AND "
                           "status = 'succeeded'", (queue,)))


def wait_succeeded(dsn: str, queue: str, count: int, processes: Processes,
                   timeout: float = 60) -> None:
    wait_until(lambda: succeeded(dsn, queue) >= count, timeout=timeout, interval=0.1,
               message=f"{count} jobs of {queue!r} to succeed\n{processes.logs()[-6000:]}")
    assert succeeded(dsn, queue) == count


def db_time(at: float) -> datetime:
    """A ``time.time()`` of a worker as a timestamptz (one machine, one clock)."""
    return datetime.fromtimestamp(at, UTC)


def most_in_window(times: Sequence[datetime], window: timedelta) -> int:
    """The most of ``times`` within any half-open window ``[t, t + window)``."""
    ordered = sorted(times)
    return max((sum(1 for u in ordered[i:] if u < t + window) for i, t in enumerate(ordered)),
               default=0)


# -- 1. Global concurrency per queue --------------------------------------------------------


def test_a_queue_concurrency_limit_holds_across_three_workers(
    dsn: str, processes: Processes
) -> None:
    """3 workers x 8 slots, queue limit 5 (set with the CLI): SQL never shows more than 5."""
    ok("queues", "set", "capped", "--concurrency", "5", "--dsn", dsn)
    workers = start_workers(processes, dsn, concurrency=8)
    with sampling(dsn, RUNNING_IN_QUEUE, ("capped",)) as sampler:
        with limits_app(dsn):
            work.using(queue="capped").enqueue_many([(0.1,)] * 60)
        wait_succeeded(dsn, "capped", 60, processes)
    highest = sampler.highest.get("all", 0)
    overlap = most_at_once(runs(processes.directory))
    print(f"{sampler.samples} samples, at most {highest} running; "
          f"at most {overlap} executions at once")
    assert highest <= 5, f"SQL showed {highest} running jobs under a limit of 5"
    assert overlap <= 5
    # The limit is used, not met by running one job at a time.
    assert highest > 1 and overlap > 1, (highest, overlap)
    # Several workers took part (the limit held across processes, not within one).
    assert scalar(dsn, "SELECT count(DISTINCT worker_id) FROM pgqueue.jobs") >= 2
    assert all(worker.alive() for worker in workers), processes.logs()


# -- 2. Per-key concurrency ----------------------------------------------------------------


def test_one_running_job_per_key_and_every_key_makes_progress(
    dsn: str, processes: Processes
) -> None:
    """200 jobs of 20 keys, key_concurrency 1: never two of a key at once, and a key whose
    jobs come last in claim order is not stuck behind the busy keys before it."""
    keys = [f"tenant:{k:02d}" for k in range(20)]
    with limits_app(dsn) as app:
        app.set_queue("keyed", key_concurrency=1)
    start_workers(processes, dsn, concurrency=8)
    with sampling(dsn, RUNNING_PER_KEY, ("keyed",)) as sampler:
        with limits_app(dsn):
            # Key by key: tenant:19's ten jobs are the last 10 of the 200 in claim order.
            for key in keys:
                work.using(queue="keyed", concurrency_key=key).enqueue_many([(0.05,)] * 10)
        wait_succeeded(dsn, "keyed", 200, processes)
    print(f"{sampler.samples} samples; most running per key: {sampler.highest}")
    assert sampler.highest, "the sampler never saw a running job"
    assert max(sampler.highest.values()) <= 1, sampler.highest
    events = runs(processes.directory)
    key_of = dict(query(dsn, "SELECT id, concurrency_key FROM pgqueue.jobs "
                             "WHERE queue = 'keyed'"))
    for key in keys:
        overlap = most_at_once(events, {i for i, k in key_of.items() if k == key})
        assert overlap == 1, (key, overlap)
    # Different keys did run side by side (the limit is per key, not per queue).
    assert most_at_once(events) > 1
    # Progress: every key had a job succeed before half of all the jobs were done.
    rows = query(dsn, """
        WITH halfway AS (
            SELECT finished_at FROM pgqueue.jobs WHERE queue = 'keyed'
             ORDER BY finished_at OFFSET 99 LIMIT 1
        )
        SELECT concurrency_key, min(finished_at) <= (SELECT finished_at FROM halfway)
          FROM pgqueue.jobs WHERE queue = 'keyed' GROUP BY concurrency_key
    """)
    late = sorted(key for key, early in rows if not early)
    assert len(rows) == 20 and late == [], f"keys with no job done by halfway: {late}"


# -- 3. Rate limit by count ----------------------------------------------------------------


def test_a_task_rate_limit_of_5_per_second_over_10_seconds(
    dsn: str, processes: Processes
) -> None:
    """@q.task(rate_limit="5/s") across 3 workers: 50 +- 5 starts in 10 s, spread evenly
    (no second with more than 7)."""
    start_workers(processes, dsn, concurrency=8)
    with limits_app(dsn):
        rated.enqueue_many([(n,) for n in range(80)])  # more than 10 s of the limit
    first = wait_until(lambda: scalar(dsn, "SELECT min(started_at) FROM pgqueue.jobs"),
                       timeout=30, message=f"a first start\n{processes.logs()}")
    window = timedelta(seconds=10)
    wait_until(lambda: scalar(dsn, "SELECT now() > %s", (first + window + timedelta(
        seconds=0.5),)), timeout=30, interval=0.2)
    starts = [row[0] for row in query(dsn, "SELECT started_at FROM pgqueue.jobs "
                                           "WHERE started_at IS NOT NULL ORDER BY 1")]
    in_window = [s for s in starts if s < first + window]
    per_second = most_in_window(starts, timedelta(seconds=1))
    print(f"{len(in_window)} starts in the first 10 s; at most {per_second} in one second")
    assert 45 <= len(in_window) <= 55, len(in_window)
    assert per_second <= 7, per_second
    # Nobody ran a job twice, and the jobs left wait (the limit, not the supply, bound).
    ran = [job_id for event, job_id, _ in runs(processes.directory) if event == "start"]
    assert len(ran) == len(set(ran))
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = 'queued'") > 0


# -- 4. Rate limit by cost ------------------------------------------------------------------


def test_a_cost_limit_holds_per_window_with_charges_corrected(
    dsn: str, processes: Processes
) -> None:
    """1000 units/10 s; each job is estimated at 200 units and reports 100 to 300 with
    ctx.charge(): the units used in any 10 s window stay within 1000 + 300.

    Why one job's worth over: starts are spread evenly, so a job that starts at t moves
    the bucket on by its charge (corrected to what it used, as soon as it reports: these
    jobs report at once and end within milliseconds, long before the next start). The
    jobs that start within one 10 s window, all but the last, have therefore used less
    than the window's 1000 units; the last one may then use up to 300 more. The claim
    admits a start up to 50 ms before the bucket's time (a worker waking a little early
    does not sleep again): 5 units at 100 units/s, per start after the first.
    """
    ok("queues", "set", "costly", "--rate", "1000 units/10s", "--dsn", dsn)
    start_workers(processes, dsn, concurrency=8)
    with limits_app(dsn):
        charged.using(queue="costly", cost=200).enqueue_many([()] * 15)
    first = wait_until(lambda: scalar(dsn, "SELECT min(started_at) FROM pgqueue.jobs"),
                       timeout=30, message=f"a first start\n{processes.logs()}")
    # The first 10 s window complete, and a little more.
    horizon = first + timedelta(seconds=10.5)
    wait_until(lambda: scalar(dsn, "SELECT now() > %s", (horizon,)), timeout=30,
               interval=0.2)
    started = {row[0] for row in query(dsn, "SELECT id FROM pgqueue.jobs WHERE "
                                            "started_at <= %s", (horizon,))}
    # Their results (the units each one reported) are committed a moment after they end.
    wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = ANY(%s) "
                                   "AND status = 'succeeded'", (list(started),))
               == len(started), timeout=10)
    rows = query(dsn, "SELECT started_at, (result->>'units')::int FROM pgqueue.jobs "
                      "WHERE id = ANY(%s) ORDER BY started_at", (list(started),))
    window = timedelta(seconds=10)
    windows = [[units for s, units in rows if t <= s < t + window] for t, _ in rows]
    used = [sum(w) for w in windows]
    print(f"{len(rows)} jobs started in 10.5 s; units per 10 s window from each start: "
          f"{used}")
    for units in windows:
        assert sum(units) <= 1000 + 300 + 5 * (len(units) - 1), (units, used)
    # The limit binds (jobs are left waiting) and is used (the first window is not idle).
    assert len(rows) < 15
    assert used[0] >= 600, used


# -- 5. A 429 pauses the key everywhere ----------------------------------------------------


def test_rate_limited_pauses_the_key_on_every_worker_while_other_keys_run(
    dsn: str, processes: Processes
) -> None:
    """Account A's first call raises RateLimited(retry_after=3, key="acct:A"): no job of
    A starts anywhere for 3 s, B's jobs go on, then A resumes; no attempt is spent."""
    with limits_app(dsn) as app:
        app.set_queue("api", key_concurrency=1)
    start_workers(processes, dsn, concurrency=8)
    with limits_app(dsn):
        call_api.using(queue="api", concurrency_key="acct:A").enqueue_many([("A",)] * 15)
        call_api.using(queue="api", concurrency_key="acct:B").enqueue_many([("B",)] * 40)
    wait_succeeded(dsn, "api", 55, processes)
    events = runs(processes.directory)
    limited = [(job_id, at) for event, job_id, at in events if event == "429"]
    assert len(limited) == 1, limited
    limited_id, raised = limited[0]
    pause_from = db_time(raised)
    pause_to = pause_from + timedelta(seconds=2.9)  # the clocks are one; 0.1 s for rounding
    starts = query(dsn, "SELECT concurrency_key, started_at, worker_id FROM pgqueue.jobs "
                        "WHERE queue = 'api'")
    a_during = [s for key, s, _ in starts if key == "acct:A" and pause_from < s < pause_to]
    b_during = [s for key, s, _ in starts if key == "acct:B" and pause_from < s < pause_to]
    a_after = sorted(s for key, s, _ in starts if key == "acct:A" and s >= pause_to)
    print(f"429 at {pause_from}; during the pause: {len(a_during)} starts of A, "
          f"{len(b_during)} of B; A again from {a_after[:1]}")
    assert a_during == []
    assert len(b_during) >= 5  # B was not held up by A's pause
    # A resumes on its own once the pause is over.
    assert a_after and a_after[0] <= pause_from + timedelta(seconds=3 + 1.5), a_after[:1]
    # The job that got the 429 ran again later, as its first attempt still.
    attempts, result = query(dsn, "SELECT attempts, result FROM pgqueue.jobs WHERE id = %s",
                             (limited_id,))[0]
    assert (attempts, result) == (1, 1)
    # The pause held on every worker, not only the one that got the 429.
    assert scalar(dsn, "SELECT count(DISTINCT worker_id) FROM pgqueue.jobs") >= 2


# -- 6. Fairness ----------------------------------------------------------------------------


def _seed_big(dsn: str, count: int) -> None:
    """``count`` jobs of key 'big' in one statement (enqueue_many would take too long)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgqueue.jobs (queue, task, args, kwargs, concurrency_key) "
            "SELECT 'fair', 'limits.work', '[0.05]'::jsonb, '{}'::jsonb, 'big' "
            "FROM generate_series(1, %s)", (count,))
        conn.execute("ANALYZE pgqueue.jobs")


def _started(dsn: str, ids: Sequence[int]) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = ANY(%s) "
                           "AND started_at IS NOT NULL", (list(ids),)))


def test_a_fair_queue_starts_a_small_key_while_a_huge_one_drains(
    dsn: str, processes: Processes
) -> None:
    """100,000 jobs of key 'big', then 10 of key 'small': in a fair queue the small key's
    jobs all start within 2 s. Without fairness they would wait for 'big' to drain
    (checked first: the same jobs do not start in an unfair queue)."""
    _seed_big(dsn, 100_000)
    start_workers(processes, dsn, concurrency=8)
    wait_until(lambda: succeeded(dsn, "fair") >= 50, timeout=30,
               message=f"'big' to drain\n{processes.logs()[-4000:]}")
    with limits_app(dsn) as app:
        # Control: in claim order behind 'big' and not fair, 'early' waits.
        early = work.using(queue="fair", concurrency_key="early").enqueue_many([(0.05,)] * 10)
        time.sleep(2)
        assert _started(dsn, early.ids) == 0
        app.set_queue("fair", fair=True)  # at run time: no worker restarts
        wait_until(lambda: _started(dsn, early.ids) == 10, timeout=15,
                   message="the held jobs to start once the queue is fair")
        small = work.using(queue="fair", concurrency_key="small").enqueue_many([(0.05,)] * 10)
    wait_until(lambda: _started(dsn, small.ids) == 10, timeout=15,
               message=f"the small key's jobs to start\n{processes.logs()[-4000:]}")
    waited = scalar(dsn, "SELECT max(started_at) - min(created_at) FROM pgqueue.jobs "
                         "WHERE id = ANY(%s)", (list(small.ids),))
    left = scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE concurrency_key = 'big' "
                       "AND status = 'queued'")
    print(f"the 10 small jobs all started within {waited} of their enqueue; "
          f"{left} big jobs still queued")
    assert waited <= timedelta(seconds=2)
    assert left > 90_000  # 'big' was still draining: fairness, not an empty queue


# -- 7. kill -9 of a worker holding limited jobs ---------------------------------------------


def test_a_killed_workers_slots_come_back_when_its_leases_are_rescued(
    dsn: str, processes: Processes
) -> None:
    """A worker holds all 4 slots of a queue and is killed with SIGKILL: its running rows
    keep the slots (the limit holds) until their leases expire and are rescued; then the
    slots come back and every job finishes."""
    ok("queues", "set", "crash", "--concurrency", "4", "--dsn", dsn)
    lease = 3.0
    doomed = processes.start_worker(dsn, app=APP, concurrency=8, lease=lease)
    with sampling(dsn, RUNNING_IN_QUEUE, ("crash",)) as sampler:
        with limits_app(dsn):
            held = hold_first_attempt.using(queue="crash").enqueue_many([(60.0,)] * 4)
        doomed_id = doomed.worker_id(dsn)
        wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = "
                                       "'running' AND worker_id = %s", (doomed_id,)) == 4,
                   timeout=20, message=f"the worker to hold 4 jobs\n{doomed.log()}")
        start_workers(processes, dsn, count=2, concurrency=8, lease=lease)
        with limits_app(dsn):
            quick = work.using(queue="crash").enqueue_many([(0.2,)] * 12)
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait(10)
        killed_at = scalar(dsn, "SELECT now()")
        # Until the first of its leases expires, nothing else may start: its rows hold
        # the slots.
        expiry = scalar(dsn, "SELECT min(lease_expires_at) FROM pgqueue.jobs WHERE "
                             "worker_id = %s AND status = 'running'", (doomed_id,))
        assert expiry is not None
        wait_succeeded(dsn, "crash", 16, processes, timeout=45)
        wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE "
                                       "status = 'running'") == 0, timeout=10)
    early = scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = ANY(%s) AND "
                        "started_at < %s", (list(quick.ids), expiry))
    print(f"killed at {killed_at}, first lease expiry {expiry}; at most "
          f"{sampler.highest.get('all')} running")
    assert early == 0, f"{early} jobs started before the dead worker's leases expired"
    assert sampler.highest.get("all", 0) <= 4, sampler.highest
    # The killed worker's jobs were rescued (their attempt counted) and ran again.
    attempts = [row[0] for row in query(dsn, "SELECT attempts FROM pgqueue.jobs WHERE "
                                             "id = ANY(%s)", (list(held.ids),))]
    assert attempts == [2, 2, 2, 2]
    # The slots came back in full: the survivors ran the limit's 4 jobs at once.
    events = runs(processes.directory)
    assert most_at_once(events, set(quick.ids)) == 4
