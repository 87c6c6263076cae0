"""docs/guides/testing.md's worked example runs as printed: its files are written where
their first line says and pytest runs them in a fresh process, which loads the plugin
through its entry point and makes its databases on this session's server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.e2e._pgq import clean_environment

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "testing.md"
BLOCK = re.compile(r"```(?:python|toml)\n# (?P<path>[\w./]+)\n(?P<code>.*?)```", re.DOTALL)


def example_files() -> dict[str, str]:
    """The guide's blocks that name a file, by that file's path."""
    return {m["path"]: m["code"] for m in BLOCK.finditer(GUIDE.read_text(encoding="utf-8"))}


def test_the_guide_names_the_files_of_a_whole_project() -> None:
    assert sorted(example_files()) == [
        "myapp/tasks.py", "pyproject.toml", "tests/conftest.py", "tests/test_signup.py",
    ]


def test_the_worked_example_passes_with_the_plugin(tmp_path: Path, admin_dsn: str) -> None:
    for path, code in example_files().items():
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code, encoding="utf-8")
    (tmp_path / "myapp" / "__init__.py").write_text("")
    env = clean_environment() | {"PGQUEUE_TEST_DSN": admin_dsn}
    # python -m pytest: the working directory (the project) is importable, as it is for
    # a project installed with pip install -e.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio",
         "-W", "error"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^3 passed", result.stdout, re.MULTILINE), result.stdout
