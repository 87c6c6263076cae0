"""pgq health's parts that need no database: thresholds and the one-line summary."""

from __future__ import annotations

import pytest

from pgqueue.cli.health import max_age
from pgqueue.errors import ConfigurationError
from pgqueue.health import HealthReport, QueueAge, unavailable


def test_max_queue_age_takes_durations_and_off() -> None:
    assert max_age("5m") == 300
    assert max_age("90") == 90
    assert max_age("OFF") is None
    assert max_age("none") is None
    with pytest.raises(ConfigurationError, match="invalid --max-queue-age 'x'"):
        max_age("x")
    assert max_age("30m", "--max-horizon-age") == 1800
    with pytest.raises(ConfigurationError, match="invalid --max-horizon-age 'y'"):
        max_age("y", "--max-horizon-age")


def test_the_summary_is_one_line() -> None:
    healthy = HealthReport(problems=[], live_workers=2,
                           oldest_ready=[QueueAge("mail", 75.2), QueueAge("b", 3)])
    assert healthy.summary() == "healthy: 2 live worker(s), oldest ready job 1m15s old in " \
                                "queue 'mail'"
    sick = HealthReport(problems=["a", "b"], live_workers=0)
    assert sick.summary() == "unhealthy: a; b"
    assert not sick.healthy
    down = unavailable("database unreachable: refused")
    assert down.to_dict() == {"healthy": False, "problems": ["database unreachable: refused"],
                              "live_workers": None, "oldest_ready": [], "paused_queues": [],
                              "database": None}
    assert HealthReport(problems=[], live_workers=1,
                        oldest_ready=[QueueAge("q", 3 * 3600 + 5 * 60)]).summary() \
        .endswith("3h05m old in queue 'q'")
