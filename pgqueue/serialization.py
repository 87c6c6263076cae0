"""JSON in and out of the database: the only format pgqueue stores. Never pickle.

Arguments of unannotated parameters must be what ``json.dumps`` accepts (NaN and
infinities excluded: PostgreSQL's jsonb rejects them). Return values are stored after
``pydantic_core.to_jsonable_python``, so models, datetimes and UUIDs come back as JSON.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

__all__ = ["dumps", "encode_result", "loads"]


def dumps(value: Any) -> str:
    """Strict JSON text: raises TypeError/ValueError for anything JSON cannot hold."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def loads(text: str | bytes) -> Any:
    """Parse JSON text."""
    return json.loads(text)


def encode_result(value: Any) -> str | None:
    """The JSON text stored in ``jobs.result``; ``None`` stays SQL NULL."""
    if value is None:
        return None
    try:
        return dumps(value)
    except (TypeError, ValueError):
        pass
    try:
        return dumps(to_jsonable_python(value))
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise TypeError(
            f"the task returned a {type(value).__name__} that cannot be stored as JSON: {exc}"
        ) from None
