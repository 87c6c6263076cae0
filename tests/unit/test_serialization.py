"""pgqueue's JSON decoding (orjson with a standard-library fallback) and strict encoding."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pgqueue.serialization import dumps, loads

DOCUMENTS: list[Any] = [
    [], {}, [1, -2, 3.5, 1e300, True, False, None], {"a": {"b": [1, "é", "\u2603"]}},
    "text with \"quotes\" and \\ backslashes", [2**63 - 1, -(2**63)], 0.1, [[[[]]]],
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_loads_reads_what_dumps_wrote(document: Any) -> None:
    text = dumps(document)
    assert loads(text) == document == json.loads(text)
    assert loads(text.encode()) == document
    assert loads(memoryview(text.encode())) == document


@pytest.mark.parametrize("number", [2**64, -(2**64) - 1, 10**40])
def test_integers_beyond_64_bits_come_back_exactly(number: int) -> None:
    # orjson refuses these; the standard library's parser takes over.
    text = dumps({"n": [number]})
    assert loads(text) == {"n": [number]}
    assert loads(bytearray(text.encode())) == {"n": [number]}
    assert loads(memoryview(text.encode())) == {"n": [number]}


def test_invalid_json_still_raises_a_value_error() -> None:
    with pytest.raises(ValueError):
        loads("{not json")
