"""Fixtures of the unit tests, which never reach a database."""

from __future__ import annotations

import pytest

from pgqueue import Queue

# Nothing listens on port 1: a Queue that tried to connect would fail at once.
OFFLINE_DSN = "postgresql://nobody@127.0.0.1:1/never-used"


@pytest.fixture
def q() -> Queue:
    """A Queue that is never connected: for registering tasks and building options."""
    return Queue(dsn=OFFLINE_DSN)
