"""Waiting for something to become true, with a deadline: tests never sleep blindly.

A bare ``time.sleep(2)`` is either too long (slow suite) or too short (flaky suite).
:func:`wait_until` polls a predicate until it returns something truthy and returns that
value, so a test can wait for a row and use it in one step::

    job = wait_until(lambda: fetch_job(conn, job_id, status="succeeded"), timeout=10)

On timeout it raises :class:`WaitTimeout` (an ``AssertionError``, so pytest reports it
as a failed expectation) naming what was awaited and the last value seen.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

__all__ = ["WaitTimeout", "async_wait_until", "wait_until"]

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0
DEFAULT_INTERVAL = 0.05


class WaitTimeout(AssertionError):
    """The awaited condition did not become true before the deadline."""


def _describe(predicate: object, message: str | None) -> str:
    if message:
        return message
    name = getattr(predicate, "__qualname__", None) or repr(predicate)
    if name == "<lambda>":
        try:
            return inspect.getsource(predicate).strip()  # type: ignore[arg-type]
        except (OSError, TypeError):
            return "lambda"
    return str(name)


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    message: str | None = None,
) -> T:
    """Call ``predicate`` until it returns a truthy value; return that value.

    Exceptions raised by the predicate propagate at once: a broken check should fail
    loudly, not be retried until the deadline hides the real error.
    """
    if timeout <= 0 or interval <= 0:
        raise ValueError("timeout and interval must be positive")
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        value = predicate()
        attempts += 1
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(
                f"timed out after {timeout:g}s ({attempts} checks) waiting for: "
                f"{_describe(predicate, message)}; last value: {value!r}"
            )
        time.sleep(min(interval, remaining))


@overload
async def async_wait_until(
    predicate: Callable[[], Awaitable[T]],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    message: str | None = None,
) -> T: ...


@overload
async def async_wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    message: str | None = None,
) -> T: ...


async def async_wait_until(
    predicate: Callable[[], Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    message: str | None = None,
) -> Any:
    """:func:`wait_until` for async tests: the predicate may be sync or return an awaitable."""
    if timeout <= 0 or interval <= 0:
        raise ValueError("timeout and interval must be positive")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    attempts = 0
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        attempts += 1
        if value:
            return value
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise WaitTimeout(
                f"timed out after {timeout:g}s ({attempts} checks) waiting for: "
                f"{_describe(predicate, message)}; last value: {value!r}"
            )
        await asyncio.sleep(min(interval, remaining))
