"""mkdocs hooks of the documentation site (mkdocs.yml ``hooks:``).

The changelog lives at the top of the repository, where GitHub and PyPI readers find
it, and links into ``docs/``; the site's ``changelog.md`` is a placeholder that this hook
fills with CHANGELOG.md, its links made relative to ``docs/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def on_page_markdown(markdown: str, *, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri != "changelog.md":
        return markdown
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", changelog)
