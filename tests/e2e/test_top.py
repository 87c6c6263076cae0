"""``pgq top`` in a real terminal: tmux runs it, ``capture-pane`` reads the screen.

The view must show the queues, their rates and the workers, follow changes in the
database, redraw in place (one header on the screen and in the scrollback, not one per
refresh), and exit 0 on Ctrl-C.
"""

from __future__ import annotations

import shlex
import subprocess
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests._polling import wait_until
from tests.e2e._pgq import clean_environment, pgq_executable


class Terminal:
    """A tmux server of its own (``-L``), one 120x30 window."""

    def __init__(self) -> None:
        self.socket = f"pgq-top-{uuid.uuid4().hex[:8]}"

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, timeout=30,
                              env=clean_environment() | {"TERM": "xterm-256color"})
        assert done.returncode == 0, f"tmux {' '.join(args)}: {done.stderr.strip()}"
        return done.stdout

    def start(self, command: list[str]) -> None:
        # The shell keeps the pane after the command and says how it ended. Its SIGINT
        # trap keeps Ctrl-C from ending it too; the command gets SIGINT's default
        # disposition (a trap, unlike an ignored signal, is not inherited).
        line = f"trap : INT; {shlex.join(command)}; echo EXITED $?; sleep 600"
        self.tmux("new-session", "-d", "-x", "120", "-y", "30", "sh", "-c", line)

    def screen(self) -> str:
        """The visible screen and the scrollback."""
        return self.tmux("capture-pane", "-p", "-S", "-")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                       timeout=30, check=False)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    opened = Terminal()
    try:
        yield opened
    finally:
        opened.close()


def _queued_line(screen: str, queue: str) -> list[str] | None:
    for line in screen.splitlines():
        if line.startswith(queue + " "):
            return line.split()
    return None


def test_top_shows_queues_rates_and_workers_and_redraws_in_place(
    dsn: str, terminal: Terminal
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgqueue.jobs (queue, task) "
                     "SELECT 'mail', 'send' FROM generate_series(1, 3)")
        conn.execute("INSERT INTO pgqueue.job_counts VALUES "
                     "(date_trunc('minute', now()) - interval '1 minute', 'mail', 'send', "
                     "'succeeded', 'w', 600)")
        conn.execute("INSERT INTO pgqueue.workers (id, hostname, pid, concurrency, "
                     "lease_expires_at) VALUES ('host:42:abc', 'host', 42, 8, "
                     "now() + interval '10 minutes')")
        terminal.start([pgq_executable(), "top", "--dsn", dsn, "--interval", "0.3",
                        "--iterations", "200"])

        first = wait_until(lambda: _queued_line(terminal.screen(), "mail"), timeout=30,
                           message="the mail queue on the screen")
        assert first is not None and first[1] == "3", first
        # 600 jobs last minute, averaged over the last 4 to 5 minutes.
        assert 100 <= float(first[7].replace(",", "")) <= 150, first
        screen = terminal.screen()
        assert "1 live worker(s)" in screen
        assert "host:42:abc" in screen and "alive" in screen
        assert "done/min" in screen

        conn.execute("INSERT INTO pgqueue.jobs (queue, task) "
                     "SELECT 'mail', 'send' FROM generate_series(1, 4)")
        wait_until(lambda: (_queued_line(terminal.screen(), "mail") or [""])[1:2] == ["7"],
                   timeout=30, message="7 queued after the refresh")

    screen = terminal.screen()
    assert screen.count("pgq top") == 1, screen  # redrawn in place, never appended
    terminal.tmux("send-keys", "C-c")
    wait_until(lambda: "EXITED 0" in terminal.screen(), timeout=30,
               message="pgq top exiting 0 on Ctrl-C")
