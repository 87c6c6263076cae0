"""Quick checks of the ``pgq`` command line that need no database (typer's CliRunner).

Everything here fails before any connection is attempted: usage errors, option parsing,
JSON and duration validation, app loading, and the log format. The real-process tests
with a database are in ``tests/e2e/test_cli.py``.
"""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from pgqueue.cli.app import app
from pgqueue.cli.context import CliContext
from pgqueue.cli.demo import job_mix
from pgqueue.cli.errors import CommandError
from pgqueue.cli.loading import load_queue
from pgqueue.cli.logs import LineFormatter, WithoutJobRecords
from pgqueue.worker import WorkerSettings

COMMANDS = ("migrate", "worker", "enqueue", "jobs", "dead", "stats", "workers", "demo")


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("PGQUEUE_DSN", "DATABASE_URL", "PGQUEUE_APP", "PGQUEUE_SCHEMA"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def test_help_lists_every_command(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in COMMANDS:
        assert command in result.output


# Every command that prints data, and the ones that only act.
DATA_COMMANDS = [["stats"], ["workers"], ["enqueue"], ["jobs", "list"], ["jobs", "show"],
                 ["jobs", "cancel"], ["dead", "list"], ["dead", "retry"], ["dead", "purge"],
                 ["demo"]]
ACTION_COMMANDS = [["migrate"], ["worker"]]


@pytest.mark.parametrize("command", DATA_COMMANDS + ACTION_COMMANDS, ids=" ".join)
def test_every_command_takes_connection_options(runner: CliRunner, command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    for option in ("--dsn", "--embedded", "--schema"):
        assert option in result.output
    assert ("--json" in result.output) == (command in DATA_COMMANDS)


def test_worker_help_quotes_the_default_settings(runner: CliRunner) -> None:
    result = runner.invoke(app, ["worker", "--help"], terminal_width=200)
    defaults = WorkerSettings()
    assert f"(default {defaults.concurrency}, or the sum of the --queues slots)" in " ".join(
        result.output.split())
    for name in ("shutdown_timeout", "poll_interval", "lease", "connect_timeout"):
        option = "--" + name.replace("_", "-")
        line = next(line for line in result.output.splitlines() if option in line)
        assert f"(default {getattr(defaults, name):g}s)" in line, line


def test_migrate_sql_prints_ddl_without_a_database(runner: CliRunner) -> None:
    result = runner.invoke(app, ["migrate", "--sql", "--schema", "elsewhere"])
    assert result.exit_code == 0, result.output
    assert "CREATE TABLE elsewhere.jobs" in result.stdout or "elsewhere" in result.stdout


def test_missing_dsn_is_one_line_naming_the_sources(runner: CliRunner) -> None:
    result = runner.invoke(app, ["stats"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for source in ("--dsn", "PGQUEUE_DSN", "DATABASE_URL", "--embedded"):
        assert source in lines[0]


def test_usage_errors_keep_clicks_format(runner: CliRunner) -> None:
    result = runner.invoke(app, ["jobs", "show", "not-a-number"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Usage: pgq jobs show [OPTIONS]")
    assert "Invalid value for 'ID'" in result.stderr


def test_dsn_and_embedded_exclude_each_other(runner: CliRunner) -> None:
    result = runner.invoke(app, ["stats", "--dsn", "postgresql://x/y", "--embedded"])
    assert result.exit_code == 2
    assert "--embedded" in result.stderr


def test_invalid_args_json_fails_before_connecting(runner: CliRunner) -> None:
    result = runner.invoke(app, ["enqueue", "t", "--args", "[1,", "--dsn", "postgresql://x/y"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: invalid --args")
    assert len(result.stderr.strip().splitlines()) == 1


def test_malformed_dsn_is_one_line(runner: CliRunner) -> None:
    result = runner.invoke(app, ["jobs", "list", "--dsn", "mysql://root@x/db"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: malformed DSN")


def test_bad_duration_is_one_line(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["dead", "purge", "--older-than", "7 weeks", "--dsn", "postgresql://x/y"]
    )
    assert result.exit_code == 1
    assert "7 weeks" in result.stderr and result.stderr.startswith("error: ")


def test_dead_retry_needs_ids_or_all(runner: CliRunner) -> None:
    assert runner.invoke(app, ["dead", "retry"]).exit_code == 2
    assert runner.invoke(app, ["dead", "retry", "1", "--all"]).exit_code == 2
    assert runner.invoke(app, ["dead", "retry", "1", "--queue", "q"]).exit_code == 2


def test_worker_needs_an_app(runner: CliRunner) -> None:
    result = runner.invoke(app, ["worker", "--dsn", "postgresql://x/y"])
    assert result.exit_code == 2
    assert "PGQUEUE_APP" in result.stderr


def test_worker_rejects_bad_settings_before_connecting(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["worker", "-A", "tests.e2e.apps.cli_tasks:queue", "--dsn", "postgresql://x/y",
              "--poll-interval", "often"]
    )
    assert result.exit_code == 1
    assert "often" in result.stderr


def test_context_merges_group_and_command_options() -> None:
    group = CliContext(dsn="postgresql://a/b", schema="s1")
    merged = group.merged(schema="s2", json=True)
    assert (merged.dsn, merged.schema, merged.json) == ("postgresql://a/b", "s2", True)
    assert CliContext(embedded=True).explicit_dsn == "embedded"


def test_load_queue_finds_the_named_or_only_queue() -> None:
    named = load_queue("tests.e2e.apps.cli_tasks:queue")
    assert "add" in named.tasks
    assert load_queue("tests.e2e.apps.cli_tasks") is named


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("tests.e2e.apps.missing:queue", "cannot import"),
        ("tests.e2e.apps.cli_tasks:nope", "no attribute"),
        ("tests.e2e.apps.cli_tasks:add", "not a pgqueue.Queue"),
        (":queue", "expected module:attribute"),
    ],
)
def test_load_queue_errors_are_clear(spec: str, fragment: str) -> None:
    with pytest.raises(CommandError, match=fragment):
        load_queue(spec)


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("pgqueue.worker", logging.WARNING, __file__, 1,
                               "Job %s failed.", (7,), None)
    record.__dict__.update(extra)
    return record


def test_log_lines_carry_timestamp_level_and_extra_fields() -> None:
    line = LineFormatter().format(_record(job_id=7, task="send email"))
    assert " WARNING pgqueue.worker: Job 7 failed. job_id=7 task='send email'" in line
    assert "\n" not in line
    assert line[:4].isdigit()


def test_demo_quiets_per_job_records_only() -> None:
    quiet = WithoutJobRecords()
    assert not quiet.filter(_record(job_id=7))
    assert quiet.filter(_record())


def test_demo_mix_has_every_behaviour() -> None:
    mix = job_mix(300)
    assert sum(count for _, count, _ in mix) == 300
    assert all(count >= 1 for _, count, _ in job_mix(4))
