"""``pgq worker --processes``: the command each child runs, and the process count.

The supervisor starts each child as ``python -m pgqueue.cli worker`` with the options of
its own command line minus ``--processes``; these tests capture that command (no process
is started: ``supervise`` is replaced) and check the count's parsing. The real processes
and signals are in tests/e2e/test_processes.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from typer.testing import CliRunner

from pgqueue.cli import worker as worker_command
from pgqueue.cli.app import app
from pgqueue.worker.supervisor import default_processes, exit_description

APP = "tests.e2e.apps.cli_tasks:queue"
DSN = "postgresql://someone@db.example/app"


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What ``supervise`` was called with (it returns 0 at once)."""
    for name in ("PGQUEUE_DSN", "DATABASE_URL", "PGQUEUE_APP", "PGQUEUE_SCHEMA"):
        monkeypatch.delenv(name, raising=False)
    calls: dict[str, Any] = {}

    def supervise(queue: Any, processes: int, command: Callable[[int, str], Sequence[str]],
                  **options: Any) -> int:
        calls.update(processes=processes, command=command, options=options)
        return 0

    monkeypatch.setattr(worker_command, "supervise", supervise)
    return calls


def _child(started: dict[str, Any], slot: int = 0, suffix: str = "ab12") -> list[str]:
    command = list(started["command"](slot, suffix))
    assert command[:4] == [sys.executable, "-m", "pgqueue.cli", "worker"]
    assert command[-2:] == ["--id-suffix", suffix]
    return command[4:-2]


def test_a_child_gets_the_command_line_options_minus_processes(
    started: dict[str, Any],
) -> None:
    result = CliRunner().invoke(app, [
        "--dsn", DSN, "worker", "-A", APP, "--processes", "3", "-c", "4", "--queues",
        "a:2,b", "--burst", "--log-format", "json", "--shutdown-timeout", "5s",
    ])
    assert result.exit_code == 0, result.output
    assert started["processes"] == 3
    assert started["options"]["burst"] is True
    assert started["options"]["shutdown_timeout"] == 5.0
    assert _child(started) == [
        "--app", APP, "--concurrency", "4", "--queues", "a:2,b", "--shutdown-timeout", "5s",
        "--burst", "--log-format", "json", "--dsn", DSN,
    ]


def test_an_app_from_the_environment_stays_in_the_environment(
    started: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQUEUE_APP", APP)
    result = CliRunner().invoke(app, ["worker", "--processes", "2", "--embedded",
                                      "--schema", "jobs"])
    assert result.exit_code == 0, result.output
    # The child inherits PGQUEUE_APP; nothing taken from the environment goes on its
    # command line (where `ps` would show it).
    assert _child(started, slot=1, suffix="ff") == ["--embedded", "--schema", "jobs"]


def test_auto_is_one_process_per_cpu(started: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["worker", "-A", APP, "--dsn", DSN, "-P", "AUTO"])
    assert result.exit_code == 0, result.output
    assert started["processes"] == default_processes() >= 1


@pytest.mark.parametrize("value", ["0", "257", "-1", "two", "1.5", ""])
def test_a_bad_count_is_a_usage_error(started: dict[str, Any], value: str) -> None:
    result = CliRunner().invoke(app, ["worker", "-A", APP, "--dsn", DSN,
                                      "--processes", value])
    assert result.exit_code == 2
    assert "is not a number of processes: give a whole number from 1 to 256, or auto" \
        in result.output
    assert not started


def test_without_processes_there_is_no_supervisor(
    started: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[dict[str, Any]] = []
    from pgqueue import Queue

    def run_worker(self: Queue, **settings: Any) -> int:
        ran.append(settings)
        return 0

    monkeypatch.setattr(Queue, "run_worker", run_worker)
    result = CliRunner().invoke(app, ["worker", "-A", APP, "--dsn", DSN, "--id-suffix", "c0"])
    assert result.exit_code == 0, result.output
    assert not started
    assert ran and ran[0]["id_suffix"] == "c0"


def test_how_a_child_ended_is_said_in_words() -> None:
    assert exit_description(1) == "exited with status 1"
    assert exit_description(-9) == "was killed by SIGKILL"
    assert exit_description(-200) == "was killed by signal 200"


def test_child_i_serves_metrics_on_port_p_plus_i(started: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["worker", "-A", APP, "--dsn", DSN, "--processes", "3",
                                      "--metrics-port", "9100"])
    assert result.exit_code == 0, result.output
    for slot in range(3):
        child = _child(started, slot=slot)
        assert child[child.index("--metrics-port") + 1] == str(9100 + slot)
        assert child.count("--metrics-port") == 1


def test_metrics_port_0_stays_0_in_every_child(started: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["worker", "-A", APP, "--dsn", DSN, "--processes", "2",
                                      "--metrics-port", "0"])
    assert result.exit_code == 0, result.output
    assert _child(started, slot=1)[-2:] == ["--metrics-port", "0"]


def test_metrics_ports_must_fit_below_65536(started: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["worker", "-A", APP, "--dsn", DSN, "--processes", "2",
                                      "--metrics-port", "65535"])
    assert result.exit_code == 2
    assert "with --processes 2 the children serve metrics on 65535 to 65536; give a port " \
           "up to 65534" in result.output
    assert not started
