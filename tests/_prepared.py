"""Statements as a server-side ``PREPARE`` sees them."""

from __future__ import annotations

import re


def as_prepared(query: bytes) -> tuple[bytes, list[str]]:
    """psycopg's ``%(name)s`` placeholders as ``$n`` for a server-side ``PREPARE``, and the
    parameter names in ``$n`` order."""
    names: list[str] = []

    def number(match: re.Match[bytes]) -> bytes:
        name = match.group(1).decode()
        if name not in names:
            names.append(name)
        return b"$%d" % (names.index(name) + 1)

    return re.sub(rb"%\((\w+)\)s", number, query).replace(b"%%", b"%"), names
