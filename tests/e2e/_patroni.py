"""A three-node Patroni cluster on loopback: etcd, three Patroni agents, their PostgreSQL.

Debian's ``patroni`` and ``etcd-server`` packages and the machine's PostgreSQL binaries
(``/usr/lib/postgresql/<major>/bin``, Debian's ``postgresql``). One etcd member keeps the
leader lock; each Patroni agent runs one PostgreSQL and its REST API. Patroni's own
settings are the ones docs/guides/high-availability.md recommends, scaled down for a
test: ``synchronous_mode: true`` (Patroni names the synchronous standby in
``synchronous_standby_names`` and promotes only it), a 20 s leader TTL, a 2 s loop.

:class:`PatroniCluster` is a ``tests.e2e._failover.Cluster``: the failover scenario runs
on it as on a plain primary/standby pair. ``lose_primary("switchover")`` asks Patroni for
a switchover to the synchronous standby (``patronictl switchover``);
``lose_primary("kill")`` kills the leader's Patroni agent and its PostgreSQL with SIGKILL
(the leader's host lost): the lock expires after the TTL and the synchronous standby
takes over. Used by ``benchmarks/patroni.py``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from tests._polling import wait_until
from tests.e2e._chaos import _server_user, free_port
from tests.e2e._replicas import kill_server

__all__ = ["PatroniCluster", "missing_programs"]

HOST = "127.0.0.1"
SCOPE = "pgqueue-demo"
TTL = 20  # seconds the leader lock lives without its holder's renewal
LOOP_WAIT = 2
RETRY_TIMEOUT = 5  # loop_wait + 2 x retry_timeout must stay within the TTL


def _postgres_bin() -> Path | None:
    """The newest Debian PostgreSQL server binaries, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda path: int(Path(path).parts[-3]))
    return Path(found[-1]).parent if found else None


def missing_programs() -> list[str]:
    """The Debian packages this cluster needs that are not installed."""
    missing = [package for program, package in (("patroni", "patroni"),
                                                ("etcd", "etcd-server"))
               if shutil.which(program) is None]
    if _postgres_bin() is None:
        missing.append("postgresql")
    return missing


@dataclass
class _Node:
    name: str
    pg_port: int
    rest_port: int
    directory: Path
    config: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def dsn(self, dbname: str) -> str:
        return make_conninfo(host=HOST, port=self.pg_port, user="postgres", dbname=dbname,
                             connect_timeout="2")

    def log(self) -> str:
        path = self.directory / "patroni.log"
        return path.read_text(errors="replace") if path.exists() else ""


class PatroniCluster:
    """etcd and three Patroni nodes (see the module docstring)."""

    def __init__(self, *, nodes: int = 3, synchronous: bool = True) -> None:
        self.synchronous = synchronous
        self.user = _server_user()
        self.bin = _postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="pgq-patroni-"))
        self.root.chmod(0o755)
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.dbname = "postgres"
        self.nodes = [
            _Node(f"node{n}", free_port(), free_port(), self.root / f"node{n}",
                  self.root / f"node{n}.yml")
            for n in range(1, nodes + 1)
        ]
        self.killed: set[str] = set()

    # -- starting -------------------------------------------------------------------------

    def _popen(self, command: list[str], log: Path) -> subprocess.Popen[bytes]:
        if self.user is not None:
            command = ["setpriv", f"--reuid={self.user}", f"--regid={self.user}",
                       "--init-groups", *command]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root),
               "LANG": "C.UTF-8"}
        with open(log, "ab") as output:
            return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output,
                                    stderr=subprocess.STDOUT, env=env, cwd=self.root,
                                    start_new_session=True)

    def _own(self, path: Path) -> None:
        if self.user is not None:
            shutil.chown(path, self.user, self.user)

    def _configuration(self, node: _Node) -> dict[str, Any]:
        # Everything on loopback trusts everyone: a throw-away cluster, no secret to keep.
        return {
            "scope": SCOPE, "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"{HOST}:{node.rest_port}",
                        "connect_address": f"{HOST}:{node.rest_port}"},
            "etcd3": {"hosts": f"{HOST}:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {"use_pg_rewind": True,
                                   "parameters": {"max_connections": 100, "fsync": "off",
                                                  "wal_log_hints": "on"}},
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
                "pg_hba": ["local all all trust", f"host replication all {HOST}/32 trust",
                           f"host all all {HOST}/32 trust"],
            },
            "postgresql": {
                "listen": f"{HOST}:{node.pg_port}", "connect_address": f"{HOST}:{node.pg_port}",
                "data_dir": str(node.data), "bin_dir": str(self.bin),
                "pgpass": str(node.directory / "pgpass"),
                "authentication": {"replication": {"username": "postgres"},
                                   "superuser": {"username": "postgres"},
                                   "rewind": {"username": "postgres"}},
                "parameters": {"unix_socket_directories": str(node.directory)},
            },
        }

    def _start_node(self, node: _Node) -> None:
        node.directory.mkdir(mode=0o700, exist_ok=True)
        self._own(node.directory)
        # JSON is YAML: no YAML writer needed.
        node.config.write_text(json.dumps(self._configuration(node), indent=2))
        node.process = self._popen(["patroni", str(node.config)],
                                   node.directory / "patroni.log")

    def start(self, setup: Callable[[str], None], dbname: str) -> None:
        """etcd, then the first node (it bootstraps and leads), then the others; wait
        until every replica streams (one synchronously), run ``setup`` on the leader."""
        if missing_programs():
            raise RuntimeError(f"missing Debian packages: {', '.join(missing_programs())}")
        self.dbname = dbname
        etcd_dir = self.root / "etcd"
        etcd_dir.mkdir(mode=0o700)
        self._own(etcd_dir)
        client = f"http://{HOST}:{self.etcd_port}"
        peer = f"http://{HOST}:{self.etcd_peer_port}"
        self.etcd = self._popen(
            ["etcd", "--name", "etcd1", "--data-dir", str(etcd_dir),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"etcd1={peer}"], self.root / "etcd.log")
        self._start_node(self.nodes[0])
        wait_until(lambda: self._leader() is not None, timeout=60, interval=0.2,
                   message=f"a Patroni leader\n{self.logs()}")
        for node in self.nodes[1:]:
            self._start_node(node)
        wait_until(self._all_streaming, timeout=90, interval=0.2,
                   message=f"every replica streaming\n{self.logs()}")
        setup(self.primary_dsn("postgres"))

    # -- reading the cluster ------------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        """Patroni's view (``GET /cluster`` of any live node's REST API)."""
        for node in self.nodes:
            if node.name in self.killed:
                continue
            url = f"http://{HOST}:{node.rest_port}/cluster"
            with contextlib.suppress(OSError, ValueError), \
                    urllib.request.urlopen(url, timeout=2) as answer:
                found: dict[str, Any] = json.loads(answer.read())
                return found
        return {"members": []}

    def _leader(self) -> _Node | None:
        names = [m["name"] for m in self.cluster()["members"]
                 if m["role"] == "leader" and m["state"] == "running"]
        return next((n for n in self.nodes if n.name in names), None)

    def _sync_standby(self) -> _Node | None:
        names = [m["name"] for m in self.cluster()["members"] if m["role"] == "sync_standby"]
        return next((n for n in self.nodes if n.name in names), None)

    def _all_streaming(self) -> bool:
        members = self.cluster()["members"]
        replicas = [m for m in members if m["role"] in ("replica", "sync_standby")
                    and m["state"] in ("running", "streaming")]
        if len(replicas) != len(self.nodes) - 1:
            return False
        return not self.synchronous or any(m["role"] == "sync_standby" for m in replicas)

    def _writable(self, node: _Node) -> datetime | None:
        """The node's clock if it takes writes now, else None."""
        with contextlib.suppress(psycopg.Error), \
                psycopg.connect(node.dsn("postgres"), autocommit=True) as conn:
            row = conn.execute("SELECT NOT pg_is_in_recovery(), clock_timestamp()").fetchone()
            if row is not None and row[0]:
                stamp: datetime = row[1]
                return stamp
        return None

    # -- the scenario's interface (tests/e2e/_failover.py, Cluster) ----------------------

    def dsn(self, dbname: str | None = None) -> str:
        return make_conninfo(
            host=",".join(HOST for _ in self.nodes),
            port=",".join(str(node.pg_port) for node in self.nodes),
            user="postgres", dbname=dbname or self.dbname,
            target_session_attrs="read-write", connect_timeout="2")

    def primary_dsn(self, dbname: str | None = None) -> str:
        for node in self.nodes:
            if node.name not in self.killed and self._writable(node) is not None:
                return node.dsn(dbname or self.dbname)
        raise AssertionError(f"no node takes writes\n{self.logs()}")

    def lose_primary(self, how: str, lag: float) -> datetime:
        """``switchover``: Patroni hands the lead to the synchronous standby; ``kill``:
        the leader's agent and PostgreSQL die by SIGKILL. The new leader's clock when it
        takes writes."""
        leader = self._leader()
        assert leader is not None, self.logs()
        candidate = self._sync_standby()
        if how == "switchover":
            assert candidate is not None, self.logs()
            done = subprocess.run(
                ["patronictl", "-c", str(leader.config), "switchover", "--leader",
                 leader.name, "--candidate", candidate.name, "--force"],
                capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 0, done.stdout + done.stderr
        elif how == "kill":
            assert leader.process is not None
            kill_server(leader.data)  # its PostgreSQL and every backend, at once
            with contextlib.suppress(ProcessLookupError):
                os.killpg(leader.process.pid, signal.SIGKILL)
            leader.process.wait(10)
            self.killed.add(leader.name)
        else:
            raise ValueError(f"unknown failure {how!r}")
        others = [node for node in self.nodes if node is not leader]
        found = wait_until(
            lambda: next(filter(None, map(self._writable, others)), None),
            timeout=TTL + 60, interval=0.05,
            message=f"a new leader taking writes\n{self.logs()}")
        assert found is not None  # wait_until returns only a truthy value
        return found

    def logs(self) -> str:
        etcd = self.root / "etcd.log"
        parts = [f"----- {node.name} -----\n{node.log()[-4000:]}" for node in self.nodes]
        if etcd.exists():
            parts.append(f"----- etcd -----\n{etcd.read_text(errors='replace')[-2000:]}")
        return "\n".join(parts)

    def destroy(self) -> None:
        """Stop the agents (SIGKILL: a test cluster), their servers, etcd; delete."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait(10)
            if (node.data / "postmaster.pid").exists():
                with contextlib.suppress(Exception):
                    kill_server(node.data)
        if self.etcd is not None and self.etcd.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.etcd.pid, signal.SIGKILL)
            self.etcd.wait(10)
        time.sleep(0.2)  # killed servers' shared memory and sockets go away
        shutil.rmtree(self.root, ignore_errors=True)
