"""The dashboard's access rules and chart data, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgqueue.dashboard.security import Access, cross_site, host_name, is_loopback
from pgqueue.dashboard.throughput import Minute, minutes, svg
from pgqueue.stats import ThroughputPoint


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True), ("LOCALHOST", True),
    ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("::", False),
    ("192.168.1.10", False), ("queue.example.com", False), ("localhost.evil.example", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(("header", "name"), [
    ("127.0.0.1:8080", "127.0.0.1"), ("localhost", "localhost"), ("[::1]:8080", "::1"),
    ("[::1]", "::1"), ("evil.example:80", "evil.example"),
])
def test_host_name(header: str, name: str) -> None:
    assert host_name(header) == name


def test_loopback_access_checks_the_host_header_only() -> None:
    access = Access.for_bind("127.0.0.1", None)
    assert access.token is None and access.authenticated(None, None)
    assert access.host_allowed("localhost:8080") and access.host_allowed("[::1]:8080")
    assert not access.host_allowed("rebound.example:8080") and not access.host_allowed(None)


def test_token_access_accepts_the_bearer_or_the_session_value() -> None:
    access = Access.for_bind("0.0.0.0", "tok")
    assert access.host_allowed("anything.example")
    assert access.authenticated("Bearer tok", None) and access.authenticated("bearer  tok", None)
    assert not access.authenticated("Bearer tok2", None)
    assert not access.authenticated("Basic tok", None) and not access.authenticated(None, None)
    session = access.session_value
    assert session is not None and "tok" not in session
    assert access.authenticated(None, session) and not access.authenticated(None, "x")
    assert Access.for_bind("0.0.0.0", "other").session_value != session


def test_non_loopback_without_a_token_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^refusing to serve the dashboard on 10\.0\.0\.5, "
                                         r"a non-loopback address, without a token"):
        Access.for_bind("10.0.0.5", "")


@pytest.mark.parametrize(("origin", "fetch_site", "refused"), [
    (None, None, False), ("http://127.0.0.1:8080", "same-origin", False),
    (None, "none", False), ("https://evil.example", None, True), ("null", None, True),
    (None, "cross-site", True), (None, "same-site", True),
    ("http://127.0.0.1:8080", "cross-site", True), ("https://127.0.0.1:8080", None, False),
    ("http://127.0.0.1:9999", None, True), ("http://127.0.0.1", None, True),
    ("file://127.0.0.1:8080", None, True),
])
def test_cross_site(origin: str | None, fetch_site: str | None, refused: bool) -> None:
    assert cross_site(origin, fetch_site, {"127.0.0.1:8080"}) is refused


def test_minutes_fill_an_hour_with_zeros_and_sum_queues() -> None:
    now = datetime(2026, 1, 1, 12, 30, 40, tzinfo=UTC)
    this_minute = now.replace(second=0)
    points = [
        ThroughputPoint(this_minute, "a", "succeeded", 3),
        ThroughputPoint(this_minute, "b", "succeeded", 4),
        ThroughputPoint(this_minute, "a", "dead", 1),
        ThroughputPoint(this_minute - timedelta(minutes=2), "a", "failed", 2),
        ThroughputPoint(this_minute - timedelta(minutes=2), "a", "snoozed", 9),
        ThroughputPoint(this_minute - timedelta(minutes=90), "a", "succeeded", 99),
    ]
    hour = minutes(points, now)
    assert len(hour) == 60 and hour[0].start == this_minute - timedelta(minutes=59)
    assert hour[-1] == Minute(this_minute, 7, 1)
    assert (hour[-3].succeeded, hour[-3].failed) == (0, 2)
    assert sum(m.succeeded + m.failed for m in hour) == 10


def test_svg_escapes_and_scales_to_the_peak() -> None:
    drawn = svg([Minute(datetime(2026, 1, 1, tzinfo=UTC), 10, 0),
                 Minute(datetime(2026, 1, 1, 0, 1, tzinfo=UTC), 5, 5)])
    assert drawn.count("<rect") == 4 and "peak 10/min" in drawn
    assert "00:01 UTC: 5 succeeded, 5 failed" in drawn
    empty = svg([])
    assert "<rect" not in empty and "peak 0/min" in empty
