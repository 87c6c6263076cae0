"""A griffe extension for the API reference: Sphinx roles in docstrings become code.

pgqueue's docstrings name things the reStructuredText way (:class:`Task`,
:meth:`enqueue`, ``literal``); mkdocstrings renders docstrings as Markdown, where a role
would show as ":class:" beside the name. The role is dropped and the name kept as code
(``~`` prefixes, which shorten a dotted path in Sphinx, shorten it here too).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|attr|exc|mod|data|obj):`~?([^`]+)`")


def _plain(match: re.Match[str]) -> str:
    name = match[1]
    if match[0].split("`", 1)[1].startswith("~"):
        name = name.rsplit(".", 1)[-1]
    return f"`{name}`"


class SphinxRoles(griffe.Extension):
    """Rewrite roles in every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_plain, obj.docstring.value)
