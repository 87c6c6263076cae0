"""The test suite's own helpers: DSN building for every DSN form, and polling."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict

from tests._database import as_url, dsn_for_database
from tests._polling import WaitTimeout, async_wait_until, wait_until

SERVER_DSNS = {
    "tcp-url": "postgresql://postgres@127.0.0.1:5432/test",
    "embedded-socket-url": "postgresql://postgres:@/postgres?host=/tmp/pgqueue-tests-x/data",
    "key-value": "host=/var/run/postgresql port=5433 user=app dbname=maintenance",
    "password-url": "postgresql://app:p%40ss%3Aw%2Fd@db.example:6543/main?sslmode=disable",
}


@pytest.mark.parametrize("server_dsn", SERVER_DSNS.values(), ids=SERVER_DSNS.keys())
@pytest.mark.parametrize("dbname", ["pgqueue_test_ab12_1", "we ird'name"])
def test_dsn_for_database_keeps_everything_but_the_database(server_dsn: str, dbname: str) -> None:
    expected = conninfo_to_dict(server_dsn)
    expected["dbname"] = dbname
    assert conninfo_to_dict(dsn_for_database(server_dsn, dbname)) == expected


@pytest.mark.parametrize("server_dsn", SERVER_DSNS.values(), ids=SERVER_DSNS.keys())
def test_as_url_is_the_same_connection_as_a_url(server_dsn: str) -> None:
    url = as_url(dsn_for_database(server_dsn, "some db"))
    assert url.startswith("postgresql://")
    expected = conninfo_to_dict(server_dsn)
    expected["dbname"] = "some db"
    assert conninfo_to_dict(url) == expected


def test_as_url_puts_a_socket_directory_in_the_query_string() -> None:
    url = as_url("user=postgres dbname=x host=/tmp/sock")
    assert url == "postgresql://postgres@/x?host=%2Ftmp%2Fsock"


def test_wait_until_returns_the_first_truthy_value() -> None:
    calls: Iterator[object] = iter([None, 0, [], {"id": 7}])
    assert wait_until(lambda: next(calls), timeout=5, interval=0.001) == {"id": 7}


def test_wait_until_fails_at_the_deadline_naming_what_it_waited_for() -> None:
    started = time.monotonic()
    with pytest.raises(WaitTimeout, match="the job to finish; last value: False"):
        wait_until(lambda: False, timeout=0.2, interval=0.01, message="the job to finish")
    elapsed = time.monotonic() - started
    assert 0.2 <= elapsed < 2
    # WaitTimeout is an AssertionError, so pytest reports a failed expectation.
    assert issubclass(WaitTimeout, AssertionError)


def test_wait_until_lets_a_broken_predicate_fail_at_once() -> None:
    def broken() -> bool:
        raise ZeroDivisionError

    started = time.monotonic()
    with pytest.raises(ZeroDivisionError):
        wait_until(broken, timeout=30)
    assert time.monotonic() - started < 1


async def test_async_wait_until_awaits_coroutine_predicates() -> None:
    values: Iterator[str | bool] = iter([False, False, "done"])

    async def check() -> str | bool:
        return next(values)

    assert await async_wait_until(check, timeout=5, interval=0.001) == "done"
    with pytest.raises(WaitTimeout):
        await async_wait_until(lambda: None, timeout=0.05, interval=0.01)
