"""JSON in and out of the database: the only format pgqueue stores. Never pickle.

Arguments of unannotated parameters must be what ``json.dumps`` accepts (NaN and
infinities excluded: PostgreSQL's jsonb rejects them). Return values are stored after
``pydantic_core.to_jsonable_python``, so models, datetimes and UUIDs come back as JSON.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

import orjson
from pydantic_core import PydanticSerializationError, to_jsonable_python

from pgqueue.errors import a_type

__all__ = ["dumps", "encode_result", "loads", "storable_text"]


# The escape of the NUL character (an odd number of backslashes before "u0000"): valid
# JSON, but PostgreSQL's jsonb refuses it, and failing in the database is too late.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


# 19 digits in a row: maybe an integer orjson cannot hold (2**63 has 19 digits).
_LONG_NUMBER_TEXT = re.compile(r"[0-9]{19}")
_LONG_NUMBER_BYTES = re.compile(rb"[0-9]{19}")


def dumps(value: Any) -> str:
    """Strict JSON text: raises TypeError/ValueError for anything jsonb cannot hold.

    Refused: NaN and infinities, the NUL character, lone surrogates (no UTF-8 form).
    Floats of 1e16 and more are written positionally with a fraction (``1e+16`` becomes
    ``10000000000000000.0``): jsonb stores numbers as decimals and prints ``1e+16`` back
    as the integer ``10000000000000000``, which would come back as an int, and for
    ``1e+300`` as an int that is not even equal to the float.
    """
    text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise ValueError("strings stored as JSON cannot contain the NUL character (\\x00)")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"strings stored as JSON cannot contain a lone surrogate "
                f"({text[exc.start]!r}): it has no UTF-8 form"
            ) from None
    if "e+" in text:
        text = _with_positional_floats(value, text)
    return text


# A float whose repr has a positive exponent (Python writes them from 1e16 on).
_EXPONENT_FLOAT = 1e16


def _with_positional_floats(value: Any, text: str) -> str:
    """``text`` (``dumps`` of ``value``) with every float >= 1e16 written positionally.

    Rare (a string containing "e+" also lands here), so it may walk the value: each big
    float is swapped for a placeholder string that ``value`` cannot contain (it holds a
    NUL, which ``dumps`` already refused), then the quoted placeholders are replaced.
    """
    numbers: list[str] = []

    def swap(item: Any) -> Any:
        if isinstance(item, float):
            if math.isfinite(item) and abs(item) >= _EXPONENT_FLOAT:
                numbers.append(format(Decimal(float.__repr__(item)), "f") + ".0")
                return f"\x00{len(numbers) - 1}\x00"
            return item
        if isinstance(item, dict):
            return {key: swap(member) for key, member in item.items()}
        if isinstance(item, list | tuple):
            return [swap(member) for member in item]
        return item

    swapped = swap(value)
    if not numbers:
        return text
    text = json.dumps(swapped, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    for index, number in enumerate(numbers):
        text = text.replace(f'"\\u0000{index}\\u0000"', number, 1)
    return text


def loads(text: str | bytes | bytearray | memoryview) -> Any:
    """Parse JSON text: orjson, falling back to the standard library for what it refuses.

    The worker decodes every claimed job's ``args``, ``kwargs`` and ``meta`` with this
    (psycopg's jsonb loader on the claim connection): orjson halves that cost, about
    8-11 µs of CPU per job measured. But orjson turns integers beyond 64 bits into
    floats, silently; ``json`` (and so pgqueue's own encoder) writes them and jsonb
    stores them exactly. Any text with a run of 19 digits therefore takes the standard
    library's path and comes back exactly as enqueued.
    """
    if isinstance(text, str):
        if _LONG_NUMBER_TEXT.search(text) is None:
            return orjson.loads(text)
    else:
        text = bytes(text)
        if _LONG_NUMBER_BYTES.search(text) is None:
            return orjson.loads(text)
    return json.loads(text)


def encode_result(value: Any, source: str = "the task") -> str | None:
    """The JSON text stored in ``jobs.result`` (or ``job_steps.result``); ``None`` stays
    SQL NULL. ``source`` names what returned ``value`` in the error."""
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
            f"{source} returned {a_type(value)} that cannot be stored as JSON: {exc}"
        ) from None


def storable_text(text: str) -> str:
    """``text`` made fit for a ``text`` column, changing only what cannot be stored.

    A NUL character becomes ``\\x00`` and a lone surrogate its ``\\udXXX`` escape:
    PostgreSQL text holds neither, and an error message or traceback containing one
    (a task's exception text is the user's) must still be recorded, not fail the write.
    Text without them is returned unchanged.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
