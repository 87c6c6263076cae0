"""docs/guides/fastapi.md and flask.md quote their example apps verbatim: each Python
block is a piece of the example file, which tests/integration/test_examples.py runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = re.compile(r"```python\n(.*?)```", re.DOTALL)


@pytest.mark.parametrize(("guide", "example"), [
    ("fastapi.md", "fastapi_orders.py"),
    ("flask.md", "flask_orders.py"),
])
def test_every_python_block_is_a_piece_of_the_example(guide: str, example: str) -> None:
    blocks = PYTHON.findall((ROOT / "docs" / "guides" / guide).read_text(encoding="utf-8"))
    source = (ROOT / "examples" / example).read_text(encoding="utf-8")
    assert len(blocks) >= 3
    for block in blocks:
        assert block in source, f"{guide}: this block is not in examples/{example}:\n{block}"
