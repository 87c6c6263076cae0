"""The pytest plugin that puts a real PgBouncer in transaction mode in front of the test
server: fixture ``pgbouncer`` (one pooler per test session, started on first use);
:func:`start_pgbouncer` also starts others (session mode, another pool size).

PgBouncer comes from the Debian package ``pgbouncer`` (``.ci/run`` installs it). In
transaction mode every transaction may run on a different server connection, so
anything a client leaves on a session — server-side prepared statements, ``SET``,
``LISTEN``, startup ``options`` — is lost or, worse, found by another client. The pool
is deliberately tiny (two server connections per database and user) so that clients
share server connections all the time and such mistakes show at once.

``pgbouncer.dsn(test_dsn)`` is ``test_dsn`` re-pointed at the pooler (same database and
user; the pooler's ``*`` entry forwards every database name to the test server).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests._database import DatabaseServer

__all__ = ["PgBouncer", "find_pgbouncer", "start_pgbouncer"]

# Server connections per (database, user): small enough that clients always share them.
POOL_SIZE = 2
START_TIMEOUT = 15.0


def find_pgbouncer() -> str:
    """The pgbouncer executable (Debian installs it in /usr/sbin, often not on PATH)."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/sbin")
    if found is None:
        pytest.fail("pgbouncer is not installed: apt-get install pgbouncer (see .ci/run)")
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PgBouncer:
    """A running pgbouncer in transaction mode; :meth:`dsn` routes a test DSN through it."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def dsn(self, server_dsn: str) -> str:
        """``server_dsn`` (any form) with host and port of the pooler instead."""
        return make_conninfo(server_dsn, host="127.0.0.1", port=str(self.port))

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # "safe shutdown": close at once
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _run_as(server_host: str) -> str | None:
    """The system user pgbouncer drops to when the tests run as root (it refuses root).

    A Unix-socket server (the embedded one) is reachable only by the owner of its socket
    directory; a TCP server by anyone.
    """
    if os.geteuid() != 0:
        return None
    if server_host.startswith("/"):
        return pwd.getpwuid(Path(server_host).stat().st_uid).pw_name
    return "nobody"


def start_pgbouncer(server: DatabaseServer, *, pool_mode: str = "transaction",
                    pool_size: int = POOL_SIZE) -> PgBouncer:
    """Start pgbouncer in front of ``server``; returns once it accepts connections."""
    params = {key: str(value) for key, value in conninfo_to_dict(server.admin_dsn).items()}
    host = params.get("host", "127.0.0.1")
    user = params.get("user", "postgres")
    backend = f"host={host}" + (f" port={params['port']}" if params.get("port") else "")
    directory = Path(tempfile.mkdtemp(prefix="pgqueue-pgbouncer-"))
    port = _free_port()
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = {backend}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {directory / 'userlist.txt'}\n"
        f"pool_mode = {pool_mode}\n"
        f"default_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
        "max_client_conn = 500\nmax_db_connections = 0\n"
        "server_login_retry = 1\nserver_lifetime = 3600\n"
        f"logfile = {directory / 'pgbouncer.log'}\npidfile = {directory / 'pgbouncer.pid'}\n"
        "log_connections = 0\nlog_disconnections = 0\n"
    )
    command = [find_pgbouncer(), "-q"]
    run_as = _run_as(host)
    if run_as is not None:
        record = pwd.getpwnam(run_as)
        for path in (directory, *directory.iterdir()):
            os.chown(path, record.pw_uid, record.pw_gid)
        command += ["-u", run_as]
    bouncer = PgBouncer(port=port, directory=directory)
    bouncer.process = subprocess.Popen(
        [*command, str(directory / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
    )
    deadline = time.monotonic() + START_TIMEOUT
    probe = bouncer.dsn(server.admin_dsn)
    while True:
        try:
            with psycopg.connect(probe, connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return bouncer
        except psycopg.OperationalError as exc:
            if bouncer.process.poll() is not None or time.monotonic() > deadline:
                bouncer.stop()
                raise RuntimeError(
                    f"pgbouncer did not start ({exc}); its log:\n{bouncer.log()}"
                ) from None
            time.sleep(0.05)


@pytest.fixture(scope="session")
def pgbouncer(database_server: DatabaseServer) -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode in front of the session's server."""
    bouncer = start_pgbouncer(database_server)
    try:
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(bouncer.directory, ignore_errors=True)
