"""DSN resolution and normalisation, durations and schema names (no database)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgqueue import ConfigurationError, Queue
from pgqueue.settings import (
    EMBEDDED,
    normalize_dsn,
    parse_duration,
    resolve_dsn,
    resolve_schema,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PGQUEUE_DSN", "DATABASE_URL", "PGQUEUE_SCHEMA"):
        monkeypatch.delenv(name, raising=False)


# -- resolution order ----------------------------------------------------------------------


def test_explicit_dsn_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", "postgresql://env@h/pgqueue_dsn")
    monkeypatch.setenv("DATABASE_URL", "postgresql://env@h/database_url")
    assert resolve_dsn("postgresql://me@h/explicit") == "postgresql://me@h/explicit"
    assert Queue(dsn="postgresql://me@h/explicit").dsn == "postgresql://me@h/explicit"


def test_pgqueue_dsn_wins_over_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", "postgresql://env@h/pgqueue_dsn")
    monkeypatch.setenv("DATABASE_URL", "postgresql://env@h/database_url")
    assert resolve_dsn() == "postgresql://env@h/pgqueue_dsn"
    assert Queue().dsn == "postgresql://env@h/pgqueue_dsn"


def test_database_url_is_the_last_resort(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://env@h:5433/database_url")
    assert resolve_dsn() == "postgresql://env@h:5433/database_url"
    assert Queue().dsn == "postgresql://env@h:5433/database_url"


def test_blank_values_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", "   ")
    monkeypatch.setenv("DATABASE_URL", "postgresql://env@h/db")
    assert resolve_dsn("") == "postgresql://env@h/db"


def test_no_dsn_anywhere_names_every_way_to_give_one() -> None:
    with pytest.raises(ConfigurationError) as raised:
        resolve_dsn()
    message = str(raised.value)
    assert "\n" not in message
    for way in ("--dsn", "PGQUEUE_DSN", "DATABASE_URL", "--embedded"):
        assert way in message
    q = Queue()  # creating a Queue touches nothing...
    with pytest.raises(ConfigurationError, match="PGQUEUE_DSN"):
        _ = q.dsn  # ...using it does


def test_embedded_is_passed_through_unresolved(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_dsn("embedded") == EMBEDDED
    monkeypatch.setenv("PGQUEUE_DSN", "embedded")
    assert resolve_dsn() == EMBEDDED


# -- accepted forms ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@h:5432/db", "postgresql://u:p@h:5432/db"),
        ("postgres://u@h/db", "postgres://u@h/db"),
        ("host=h port=5432 dbname=db user=u", "host=h port=5432 dbname=db user=u"),
        ("postgresql+psycopg://u:p@h:5432/db?sslmode=require",
         "postgresql://u:p@h:5432/db?sslmode=require"),
        ("postgresql+psycopg2://u@h/db", "postgresql://u@h/db"),
        ("postgres+psycopg://u@h/db", "postgres://u@h/db"),
        ("postgresql+asyncpg://u@/db?host=/tmp/sock", "postgresql://u@/db?host=/tmp/sock"),
        ("postgresql://u@h1:5432,h2:5433/db", "postgresql://u@h1:5432,h2:5433/db"),
    ],
)
def test_accepted_dsn_forms(given: str, expected: str) -> None:
    assert normalize_dsn(given) == expected


@pytest.mark.parametrize(
    "malformed",
    [
        "not a dsn",
        "host=h port",
        "host='unterminated",
        "postgresql://[::1",
        "mysql://u@h/db",
        "http://example.com",
        "postgresql://u@h:notaport/db",
        "host=h port=fifty",
    ],
)
def test_malformed_dsn_fails_at_once_in_one_line(malformed: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        normalize_dsn(malformed)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("malformed DSN")
    with pytest.raises(ConfigurationError, match="malformed DSN"):
        Queue(dsn=malformed)


def test_malformed_dsn_from_the_environment_fails_when_resolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://u@h/db")
    with pytest.raises(ConfigurationError, match="not PostgreSQL"):
        resolve_dsn()


# -- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30s", 30.0), ("15m", 900.0), ("1h", 3600.0), ("7d", 604800.0), ("250ms", 0.25),
        ("10", 10.0), ("1.5h", 5400.0), (" 5 m ", 300.0), ("2H", 7200.0), (45, 45.0),
        (2.5, 2.5), (0, 0.0), (timedelta(minutes=2), 120.0),
    ],
)
def test_durations(value: str | float | timedelta, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "5x", "-5", "-5s", "1e3", "soon", "5 minutes", True, None,
                                   [5], -1, timedelta(seconds=-1)])
def test_bad_durations_name_what_was_wrong(value: object) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_duration(value, what="shutdown timeout")  # type: ignore[arg-type]
    assert "shutdown timeout" in str(raised.value)
    assert "\n" not in str(raised.value)


# -- schema names ----------------------------------------------------------------------------


def test_schema_from_argument_environment_or_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_schema() == "pgqueue"
    monkeypatch.setenv("PGQUEUE_SCHEMA", "from_env")
    assert resolve_schema() == "from_env"
    assert resolve_schema("explicit_one") == "explicit_one"
    assert Queue(dsn="postgresql://u@h/db").schema == "from_env"


@pytest.mark.parametrize("name", ["1abc", "has space", "semi;colon", "dash-ed", "x" * 64])
def test_bad_schema_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="schema name"):
        resolve_schema(name)
