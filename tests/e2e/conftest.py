"""Fixtures for the end-to-end tests: real processes that are always cleaned up."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e._chaos import NetworkLab, PrivateServer, Processes, create_chaos_tables


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """Starts ``pgq worker`` subprocesses; SIGKILLs every process group it started at the end."""
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


@pytest.fixture
def chaos_dsn(dsn: str) -> str:
    """The test's migrated database, plus the ``chaos_runs``/``chaos_effects`` tables."""
    create_chaos_tables(dsn)
    return dsn


@pytest.fixture
def private_server() -> Iterator[Callable[..., PrivateServer]]:
    """Makes PostgreSQL servers owned by this test (stopped and deleted at the end)."""
    servers: list[PrivateServer] = []

    def make(**options: Any) -> PrivateServer:
        server = PrivateServer(**options)
        servers.append(server)
        server.init()
        server.start()
        return server

    try:
        yield make
    finally:
        for server in reversed(servers):
            server.destroy()


@pytest.fixture
def network_lab() -> Iterator[NetworkLab]:
    """A database host and a worker host (network namespaces) joined by a veth pair."""
    lab = NetworkLab()
    try:
        lab.create()
        yield lab
    finally:
        lab.destroy()


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A fresh working directory for a ``pgq`` process (``--embedded`` puts its
    ``.pgqueue/`` there), removed afterwards.

    Not pytest's ``tmp_path``: several pytest sessions share this machine, and each
    prunes the older ``/tmp/pytest-of-<user>/pytest-N`` directories of the others, which
    pulled the data directory from under a starting server.
    """
    path = Path(tempfile.mkdtemp(prefix="pgq-cli-e2e-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
