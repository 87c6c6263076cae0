"""docs/guides/django.md shows the code that tests/integration/test_django_backend.py
runs: each block naming a file of the test project is that file, the settings block
configures the same backend, and the worker command is the one the tests start."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "django.md"
PROJECT = ROOT / "tests" / "integration" / "django_project"
BLOCK = re.compile(r"```python\n# (?P<path>[\w./]+)\n(?P<code>.*?)```", re.DOTALL)


def named_blocks() -> dict[str, str]:
    return {m["path"]: m["code"] for m in BLOCK.finditer(GUIDE.read_text(encoding="utf-8"))}


def test_the_guides_files_are_the_test_projects() -> None:
    blocks = named_blocks()
    assert sorted(blocks) == ["settings.py", "shop/tasks.py", "shop/views.py"]
    for path in ("shop/tasks.py", "shop/views.py"):
        assert blocks[path] == (PROJECT / path).read_text(encoding="utf-8"), path


def test_the_guides_settings_are_the_test_projects() -> None:
    from tests.integration.django_project import settings

    namespace: dict[str, Any] = {}
    exec(named_blocks()["settings.py"], namespace)
    assert namespace["TASKS"] == settings.TASKS
    guide_apps = [app for app in namespace["INSTALLED_APPS"] if app != "shop"]
    if not settings._BACKPORT:  # the guide lists the backport's app, for Python 3.11
        guide_apps.remove("django_tasks")
    assert guide_apps == [app for app in settings.INSTALLED_APPS if not app.endswith(".shop")]


def test_the_guides_worker_command_is_the_one_the_tests_run() -> None:
    guide = GUIDE.read_text(encoding="utf-8")
    assert "pgq worker -A pgqueue.contrib.django.worker\n" in guide
    tests = (ROOT / "tests" / "integration" / "test_django_backend.py").read_text()
    assert '"worker", "-A", "pgqueue.contrib.django.worker", "--burst"' in tests
