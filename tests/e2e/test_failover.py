"""Failover to a streaming replica under load: real servers, real workers, kill -9.

A PostgreSQL 18 primary and its ``pg_basebackup -R`` standby on loopback; two
``pgq worker`` processes and a producer on the multi-host DSN
(``target_session_attrs=read-write``); each job commits its effect in
``ctx.transaction()``. The primary is killed with SIGKILL and the standby promoted
(``tests/e2e/_failover.py`` runs the scenario; ``benchmarks/failover.py`` measures it
at a larger scale). What pgqueue promises across it:

* with synchronous replication no committed enqueue is lost;
* with either, no job's effect is committed twice;
* no job stays ``running`` lease + 5 s after the promotion when nobody runs it — also
  after an asynchronous failover that lost the completion of a job whose claim the
  standby had received;
* the workers claim on the new primary within 5 s of the promotion, without a restart.

Asynchronous replication loses the commits the standby had not received (PostgreSQL's
trade-off, counted here, not judged); the lag is made real by stopping the primary's
WAL sender for 1.5 s before the kill.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._failover import run_failover

# Its servers are its own: see tests/conftest.py.
pytestmark = pytest.mark.own_server

LEASE = 4.0
FIRST_CLAIM_BOUND = 5.0


@pytest.mark.parametrize("failure", ["sync-kill", "async-lag-kill"])
def test_failover_to_the_standby_keeps_every_promise(tmp_path: Path, failure: str) -> None:
    result = run_failover(failure, tmp_path, workers=2, concurrency=4, lease=LEASE,
                          interval=0.01, task_seconds=0.02, before=3.0, after=3.0, lag=1.5)
    print(f"\n{failure}: {result.row()}")
    context = f"{result.row()}\n{result.logs}"
    # The load ran on both sides of the failover.
    assert result.committed_before > 20 and result.committed_after > 20, context
    if failure == "sync-kill":
        assert result.lost == [], context
    else:
        # The frozen WAL sender did cost commits: the scenario is the lossy one.
        assert result.lost, context
    assert result.duplicate_effects == [], context
    assert result.stuck == [], (
        f"jobs claimed before the promotion still running {LEASE:g} s + 5 s after it: "
        f"{result.stuck}\n{context}")
    assert result.first_claim_seconds is not None, context
    assert result.first_claim_seconds <= FIRST_CLAIM_BOUND, context
    assert result.unfinished == [], context
    assert result.dead == 0, context
