"""The pytest plugin's configuration: ``pgqueue_app`` errors say what is expected."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from pgqueue import Queue
from pgqueue.testing.plugin import _app_queue


class Config:
    """The one method of pytest.Config that _app_queue calls."""

    def __init__(self, app: str) -> None:
        self.app = app

    def getini(self, name: str) -> str:
        assert name == "pgqueue_app"
        return self.app


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    found = types.ModuleType("pgqueue_plugin_app")
    found.q = Queue("postgresql://nowhere/db")  # type: ignore[attr-defined]
    found.other = 42  # type: ignore[attr-defined]
    sys.modules[found.__name__] = found
    try:
        yield found
    finally:
        del sys.modules[found.__name__]


def test_pgqueue_app_names_the_queue(module: types.ModuleType) -> None:
    assert _app_queue(Config("pgqueue_plugin_app:q")) is module.q  # type: ignore[arg-type]


@pytest.mark.parametrize(("app", "message"), [
    ("", "needs the ini option pgqueue_app = module:name"),
    ("pgqueue_plugin_app", "needs the ini option pgqueue_app = module:name"),
    ("pgqueue_plugin_app:other", "is not a pgqueue Queue (got int)"),
    ("pgqueue_plugin_app:missing", "is not a pgqueue Queue (got NoneType)"),
])
def test_a_bad_pgqueue_app_is_a_usage_error(
    module: types.ModuleType, app: str, message: str,
) -> None:
    with pytest.raises(pytest.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _app_queue(Config(app))  # type: ignore[arg-type]
