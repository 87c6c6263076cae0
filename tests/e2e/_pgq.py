"""Running the real ``pgq`` console script from tests: one way, shared by every e2e test.

Every call runs the installed script in a subprocess with a clean environment (no
``PGQUEUE_DSN``/``DATABASE_URL``/``PGQUEUE_APP``/``PGQUEUE_SCHEMA`` leaking in from the
developer's shell) and the repository on ``PYTHONPATH``, so ``-A tests.e2e.apps…``
imports the test apps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# The Queue of tests/e2e/apps/cli_tasks.py, as ``-A`` names it.
APP = "tests.e2e.apps.cli_tasks:queue"
TIMEOUT = 120
# An address nothing listens on: connection refused at once.
UNREACHABLE_DSN = "postgresql://postgres@127.0.0.1:1/nothing"
_SETTINGS = frozenset({"PGQUEUE_DSN", "DATABASE_URL", "PGQUEUE_APP", "PGQUEUE_SCHEMA"})


def pgq_executable() -> str:
    """The ``pgq`` console script of the Python running the tests (a venv's in CI)."""
    beside = Path(sys.executable).with_name("pgq")
    found = str(beside) if beside.exists() else shutil.which("pgq")
    if found is None:
        raise RuntimeError("no pgq console script: pip install -e '.[dev]'")
    return found


def clean_environment(*python_paths: Path) -> dict[str, str]:
    """This process's environment without pgqueue's settings; ``python_paths`` and the
    repository first on ``PYTHONPATH``; a fixed terminal width for tables."""
    env = {key: value for key, value in os.environ.items() if key not in _SETTINGS}
    env["PYTHONPATH"] = os.pathsep.join(
        [*map(str, python_paths), str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["COLUMNS"] = "120"
    return env


def pgq(*args: str, cwd: Path | None = None, timeout: float = TIMEOUT,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``pgq ARGS`` to completion and return its result (never raises on failure)."""
    return subprocess.run(
        [pgq_executable(), *args], capture_output=True, text=True, timeout=timeout,
        cwd=cwd or REPO, env=env or clean_environment(), check=False,
    )


def ok(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``pgq ARGS`` and insist that it succeeded."""
    result = pgq(*args, **kwargs)
    assert result.returncode == 0, (
        f"pgq {' '.join(args)} exited {result.returncode}\nstdout:\n{result.stdout}\n"
        f"stderr:\n{result.stderr}"
    )
    return result


def json_of(*args: str, **kwargs: Any) -> Any:
    """Run ``pgq ARGS --json`` and parse its stdout."""
    return json.loads(ok(*args, "--json", **kwargs).stdout)


def stderr_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The non-blank lines ``pgq`` wrote to stderr."""
    return [line for line in result.stderr.splitlines() if line.strip()]


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit status 1, exactly one stderr line ``error: …`` containing every fragment."""
    lines = stderr_lines(result)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
