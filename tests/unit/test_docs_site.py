"""The documentation site's sources agree with the code and with each other.

``mkdocs build --strict`` (a step of .ci/run) checks links, anchors and references;
these checks are what it cannot know: that every public name has its generated
reference, and that every page the site lists exists and every page is listed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pgqueue

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _nav_pages() -> list[str]:
    """The Markdown files mkdocs.yml's nav names, in order (read without a YAML parser:
    the file's ``!!python/name`` tag needs mkdocs' own loader)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text.split("\nnav:\n", 1)[1]
    return re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)$", nav, flags=re.MULTILINE)


def test_every_public_name_has_a_generated_reference() -> None:
    text = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: pgqueue\.(\w+)$", text, flags=re.MULTILINE))
    public = {name for name in pgqueue.__all__ if not name.startswith("__")}
    assert public - documented == set()
    assert "pgqueue.__version__" in text


def test_the_nav_lists_every_page_once_and_only_pages_that_exist() -> None:
    listed = _nav_pages()
    assert len(listed) == len(set(listed)), "a page is listed twice"
    missing = [page for page in listed if not (DOCS / page).is_file()]
    assert missing == []
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert pages - set(listed) == set(), "pages not in mkdocs.yml's nav"
