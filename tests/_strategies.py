"""Hypothesis strategies for hostile input: what users, their tasks and their rows may give.

Shared by the property tests of the API boundary (tests/unit/test_input_properties.py,
tests/integration/test_input_round_trips.py) and meant for the worker's hardening tests
(the same task arguments, results and error texts, raised or returned by tasks, must
never take a worker down).

Each strategy mixes values that must be accepted with values that must be refused in
one line: the property under test is "accepted and round-trips, or refused cleanly",
never "raises something else".
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "durations",
    "enqueue_json_texts",
    "error_texts",
    "idempotency_keys",
    "json_normalized",
    "json_values",
    "names",
    "queue_names",
    "results",
    "schema_names",
    "task_arguments",
]

# Any character, including NUL, lone surrogates, newlines, terminal escapes and the
# Unicode line separators: the ones that break storage, logs and terminals.
_NASTY_CHARACTERS = st.sampled_from(
    ["\x00", "\n", "\r", "\t", "\x1b", "\u2028", "\ud800", "\udfff", ",", "'", '"', "\\",
     "é", "💥", " "]
)
any_text = st.text(
    alphabet=st.one_of(st.characters(codec=None), _NASTY_CHARACTERS), max_size=40
)

_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e16, 1e300, -1.5e17, 5e-324, 1.7976931348623157e308, 10**30, -0.0]),
)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), _numbers, any_text),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(any_text, children, max_size=4),
    ),
    max_leaves=12,
)
"""JSON-shaped values, some of which jsonb cannot hold (NaN, NUL, lone surrogates)."""

task_arguments = st.tuples(
    st.lists(json_values, max_size=3),
    st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), json_values,
                    max_size=3),
)
"""(positional, keyword) arguments for a task taking ``*args, **kwargs``."""

results = st.one_of(
    json_values,
    st.builds(set, st.lists(st.integers(), max_size=3)),
    st.builds(object),
    st.builds(timedelta, seconds=st.integers(0, 10**6)),
)
"""What a task may return: JSON, things pydantic can convert, and things nothing can."""

error_texts = st.one_of(any_text, st.text(max_size=2000))
"""Exception messages and tracebacks, as a task (or its libraries) may produce."""

names = st.one_of(
    any_text,
    st.from_regex(r"[A-Za-z0-9_.:\- ]{1,30}", fullmatch=True),
    st.text(min_size=195, max_size=260),
)
"""Candidate queue and task names: plain ones, padded ones, long ones, nasty ones."""

queue_names = names

idempotency_keys = st.one_of(
    any_text,
    st.text(min_size=250, max_size=1100),
    st.text(alphabet="é💥", min_size=200, max_size=600),
)
"""Keys around the 1,024-byte limit, in 1-, 2- and 4-byte UTF-8 characters."""

durations: st.SearchStrategy[Any] = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**12), max_value=10**400),
    st.from_regex(r"\s*[0-9]{1,14}(\.[0-9]{1,3})?\s*(ms|s|m|h|d)?\s*", fullmatch=True),
    any_text,
    st.timedeltas(),
    st.booleans(),
)
"""Durations as users pass them: numbers, strings with units, timedeltas, nonsense."""

schema_names = st.one_of(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,65}", fullmatch=True),
    any_text,
)
"""Schema names: identifiers of every length around the 58-character limit, and not."""

enqueue_json_texts = st.one_of(
    json_values.map(lambda value: json.dumps(value, ensure_ascii=False)),
    st.lists(json_values, max_size=3).map(json.dumps),
    any_text,
)
"""What ``pgq enqueue --args/--kwargs`` may be given: JSON of any shape, or not JSON."""


def json_normalized(value: Any) -> Any:
    """``value`` as it comes back from JSON: tuples as lists, keys as strings."""
    return json.loads(json.dumps(value, allow_nan=True))


def same_json(left: Any, right: Any) -> bool:
    """Equality of JSON values that also holds for -0.0 == 0.0 and int == float."""
    if isinstance(left, float) and isinstance(right, float):
        return left == right or (math.isnan(left) and math.isnan(right))
    return bool(left == right)
