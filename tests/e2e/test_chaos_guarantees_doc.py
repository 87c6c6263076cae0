"""docs/explanation/delivery-guarantees.md names the tests behind each claim: they exist.

The page cites tests as `` `tests/…/file.py::test_name` `` and, right after such a
citation, more tests of the same file as `` `::test_name` ``. A renamed or deleted test
fails here until the page says what proves the claim now.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "explanation" / "delivery-guarantees.md"
CITATION = re.compile(r"`(tests/[\w/]+\.py)?::(\w+)(?:\[[\w-]+\])?`|`(tests/[\w/]+\.py)`")


def _citations() -> list[tuple[str, str]]:
    cited: list[tuple[str, str]] = []
    current: str | None = None
    for match in CITATION.finditer(PAGE.read_text(encoding="utf-8")):
        if match[3]:
            current = match[3]
            continue
        current = match[1] or current
        assert current is not None, f"`::{match[2]}` cited before any test file"
        cited.append((current, match[2]))
    return cited


def test_every_test_the_delivery_guarantees_page_cites_exists() -> None:
    cited = _citations()
    assert len(cited) > 40
    missing = []
    for file, name in cited:
        path = ROOT / file
        if not path.exists() or not re.search(
            rf"^(?:async )?def {name}\(", path.read_text(encoding="utf-8"), re.MULTILINE
        ):
            missing.append(f"{file}::{name}")
    assert missing == []


def test_every_chaos_test_is_cited() -> None:
    cited = {f"{file}::{name}" for file, name in _citations()}
    for path in sorted((ROOT / "tests" / "e2e").glob("test_chaos_*.py")):
        if path.name == Path(__file__).name:
            continue
        for name in re.findall(r"^def (test_\w+)\(", path.read_text(encoding="utf-8"),
                               re.MULTILINE):
            assert f"tests/e2e/{path.name}::{name}" in cited, f"{path.name}::{name}"
