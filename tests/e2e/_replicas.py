"""A primary and a streaming standby on loopback, and a failover between them.

Built on :class:`tests.e2e._chaos.PrivateServer` (the embedded wheel's PostgreSQL 18
binaries, which include ``pg_basebackup``): :meth:`ReplicaPair.create` starts a primary,
lets the caller create its database, then clones it with ``pg_basebackup -R`` (which
writes the standby's ``primary_conninfo`` and ``standby.signal``) and starts the standby.

* ``synchronous=True``: the primary waits for the standby to flush every commit
  (``synchronous_standby_names = '*'``). It is set on the primary *after* the base
  backup, so that the standby does not inherit it: a promoted standby that kept it would
  wait for a standby of its own that does not exist, and every commit would hang (the
  setting a high-availability manager such as Patroni rewrites at promotion).
* :meth:`ReplicaPair.kill_primary` — ``kill -9`` of the postmaster and of every process
  it started, at once: a crash of the primary's host as its clients see it on loopback.
* :meth:`ReplicaPair.pause_replication` — ``SIGSTOP`` of the primary's WAL sender: the
  primary keeps committing (asynchronously replicated) while the standby receives
  nothing, which is real replication lag; :meth:`resume_replication` ends it.
* :meth:`ReplicaPair.promote` — ``pg_ctl promote -w``; returns the new primary's
  ``clock_timestamp()`` once it accepts writes.

:meth:`ReplicaPair.dsn` is the multi-host DSN a client of such a pair uses:
``host=…,… port=p1,p2 target_session_attrs=read-write``, so libpq skips the standby
while it is read-only and the dead primary once it is gone.

Used by ``tests/e2e/test_failover.py`` and ``benchmarks/failover.py`` (through
``tests/e2e/_failover.py``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from tests._polling import wait_until
from tests.e2e._chaos import PrivateServer

__all__ = ["ReplicaPair", "kill_server"]

HOST = "127.0.0.1"


class _Standby(PrivateServer):
    """A server whose data directory is a base backup of ``primary`` (not an initdb)."""

    def clone(self, primary: PrivateServer) -> _Standby:
        self._run("pg_basebackup", "-D", str(self.data), "-h", HOST, "-p", str(primary.port),
                  "-U", "postgres", "-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
        # The copied postgresql.conf carries the primary's port and socket directory: the
        # settings appended last win.
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# standby of the pgqueue failover test\n")
            conf.write(f"port = {self.port}\n")
            conf.write(f"unix_socket_directories = '{self.socket_dir}'\n")
            conf.write("listen_addresses = '127.0.0.1'\n")
            # Answer a promotion at once (the default waits for a 5 s timer at worst).
            conf.write("wal_receiver_status_interval = 1\n")
        return self


class ReplicaPair:
    """A primary, a ``pg_basebackup -R`` standby, and the failover between them."""

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        self.primary = PrivateServer(listen=HOST)
        self.standby = _Standby(listen=HOST)
        self.dbname = "postgres"
        self.primary_alive = False
        self._paused: int | None = None  # the WAL sender's pid while it is stopped

    # -- setting up ----------------------------------------------------------------------

    def start_primary(self) -> ReplicaPair:
        self.primary.init()
        with open(self.primary.data / "postgresql.conf", "a") as conf:
            # Replication: a sender for the standby and one for pg_basebackup's WAL stream.
            conf.write("wal_level = replica\nmax_wal_senders = 5\n")
        self.primary.start()
        self.primary_alive = True
        return self

    def start_standby(self, dbname: str) -> ReplicaPair:
        """Clone the primary (after ``dbname`` was created and migrated there), start the
        standby and wait until it streams (and, when synchronous, is the sync standby)."""
        self.dbname = dbname
        if self.standby.user is not None:
            # pg_basebackup runs as the server user and creates the data directory.
            shutil.chown(self.standby.root, self.standby.user, self.standby.user)
        self.standby.clone(self.primary)
        self.standby.start()
        if self.synchronous:
            with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
        wanted = "sync" if self.synchronous else "async"
        wait_until(lambda: self._primary_sees(wanted), timeout=30, interval=0.1,
                   message=f"the standby streaming ({wanted}) from the primary")
        return self

    def _primary_sees(self, sync_state: str) -> bool:
        with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
            row = conn.execute("SELECT sync_state FROM pg_stat_replication "
                               "WHERE state = 'streaming'").fetchone()
        return row is not None and row[0] == sync_state

    # -- DSNs --------------------------------------------------------------------------------

    def dsn(self, dbname: str | None = None) -> str:
        """The clients' DSN: both servers over TCP, the writable one wins."""
        return make_conninfo(
            host=f"{HOST},{HOST}", port=f"{self.primary.port},{self.standby.port}",
            user="postgres", dbname=dbname or self.dbname,
            target_session_attrs="read-write", connect_timeout="2",
        )

    def standby_dsn(self, dbname: str | None = None) -> str:
        """The standby alone (over its Unix socket): the new primary once promoted."""
        return self.standby.dsn(dbname or self.dbname)

    # -- the failure -------------------------------------------------------------------------

    def kill_primary(self) -> None:
        """``kill -9`` the primary's postmaster and all of its processes together."""
        kill_server(self.primary.data)
        self.primary_alive = False
        self.primary.started = False

    def stop_primary(self) -> None:
        """A clean switchover's first half: ``pg_ctl stop -m fast``, which sends every WAL
        record to the standby before it exits."""
        self.primary.stop("fast")
        self.primary_alive = False

    def pause_replication(self) -> None:
        """Freeze the primary's WAL sender: the primary keeps committing (asynchronous
        replication does not wait for it) while the standby receives nothing. Stopping
        the standby's WAL receiver instead loses nothing: what the sender wrote waits in
        the loopback socket's buffers, and the receiver reads it before the promotion."""
        with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
            row = conn.execute("SELECT pid FROM pg_stat_replication").fetchone()
        assert row is not None, "the primary has no WAL sender"
        self._paused = int(row[0])
        os.kill(self._paused, signal.SIGSTOP)

    def resume_replication(self) -> None:
        """Let the WAL sender run again (after a kill -9 there is nothing to resume)."""
        pid, self._paused = self._paused, None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    # -- the scenario's interface (tests/e2e/_failover.py, Cluster) ----------------------

    def start(self, setup: Callable[[str], None], dbname: str) -> None:
        """Start the primary, let ``setup`` create database ``dbname`` there (given the
        primary's maintenance DSN), then clone and start the standby."""
        self.start_primary()
        setup(self.primary.dsn())
        self.start_standby(dbname)

    def lose_primary(self, how: str, lag: float) -> datetime:
        """Lose the primary (``kill``, ``switchover`` or ``lag-kill`` after ``lag``
        seconds of stopped replication); promote the standby; when it took writes."""
        if how == "switchover":
            self.stop_primary()
        elif how == "lag-kill":
            self.pause_replication()
            time.sleep(lag)  # commits the standby never receives
            self.kill_primary()
        elif how == "kill":
            self.kill_primary()
        else:
            raise ValueError(f"unknown failure {how!r}")
        return self.promote()

    def primary_dsn(self) -> str:
        """The writable server, directly (after the failover: the promoted standby)."""
        server = self.primary if self.primary_alive else self.standby
        return server.dsn(self.dbname)

    def promote(self) -> datetime:
        """Promote the standby; its clock when it accepts writes."""
        self.standby._run("pg_ctl", "-D", str(self.standby.data), "-w", "-t", "60", "promote")
        with psycopg.connect(self.standby.dsn(self.dbname), autocommit=True) as conn:
            wait_until(lambda: not _scalar(conn, "SELECT pg_is_in_recovery()"),
                       timeout=30, interval=0.01, message="the standby out of recovery")
            promoted = _scalar(conn, "SELECT clock_timestamp()")
        assert isinstance(promoted, datetime)
        return promoted

    # -- cleaning up -------------------------------------------------------------------------

    def logs(self) -> str:
        return (f"----- primary log -----\n{self.primary.log()}\n"
                f"----- standby log -----\n{self.standby.log()}")

    def destroy(self) -> None:
        self.resume_replication()  # a stopped WAL sender would keep the primary up
        for server in (self.standby, self.primary):
            with contextlib.suppress(Exception):
                server.destroy()


def kill_server(data: Path) -> None:
    """``kill -9`` the postmaster of data directory ``data`` and every process it started,
    at once (a lone postmaster kill leaves backends that finish their statements): a
    crash of the server's host, as its clients see it on loopback."""
    postmaster = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True,
                              text=True, check=False).stdout.split()
    for pid in [postmaster, *map(int, children)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not _alive(postmaster), timeout=10, interval=0.02,
               message="the killed postmaster gone")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped by pg_ctl's shell) counts as gone.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return False


def _scalar(conn: psycopg.Connection[tuple[object, ...]], statement: str) -> object:
    row = conn.execute(statement).fetchone()
    assert row is not None
    return row[0]

