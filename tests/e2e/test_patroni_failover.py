"""A Patroni cluster under load: a switchover and a failover, with real pgq workers.

Three Patroni nodes (Debian's ``patroni``, ``etcd-server`` and ``postgresql``) on
loopback with ``synchronous_mode: true``; two ``pgq worker`` processes and a producer on
the multi-host DSN (``target_session_attrs=read-write``), each job committing its effect
in ``ctx.transaction()`` (``tests/e2e/_failover.py``, the scenario of
``test_failover.py``). Patroni switches the lead to the synchronous standby, or the
leader's agent and PostgreSQL are killed with SIGKILL and the lock expires (20 s TTL).
Either way: no committed enqueue lost, no effect twice, no job claimed before the change
left ``running`` lease + 5 s after it, the first claim within 5 s of the new leader
taking writes, every job done. docs/guides/high-availability.md shows the figures of
``benchmarks/failover.py --runs patroni-switchover,patroni-kill``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e._failover import run_scenario
from tests.e2e._patroni import PatroniCluster, missing_programs

# Its servers are its own: see tests/conftest.py.
pytestmark = pytest.mark.own_server

LEASE = 4.0


@pytest.mark.parametrize("how", ["switchover", "kill"])
def test_patroni_switchover_and_failover_keep_every_promise(tmp_path: Path, how: str) -> None:
    missing = missing_programs()
    if missing:
        message = (f"Patroni's packages are not installed: apt-get install "
                   f"{' '.join(missing)} (see .ci/run)")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    result = run_scenario(PatroniCluster(), f"patroni-{how}", how, tmp_path, workers=2,
                          concurrency=4, lease=LEASE, interval=0.01, task_seconds=0.02,
                          before=3.0, after=3.0)
    print(f"\npatroni {how}: {result.row()}")
    context = f"{result.row()}\n{result.logs}"
    assert result.committed_before > 20 and result.committed_after > 20, context
    assert result.lost == [], context  # synchronous_mode: the new leader had every commit
    assert result.duplicate_effects == [], context
    assert result.stuck == [], context
    assert result.first_claim_seconds is not None, context
    assert result.first_claim_seconds <= 5.0, context
    assert result.unfinished == [], context
    assert result.dead == 0, context
