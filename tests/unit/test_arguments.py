"""Binding, validating and rebuilding task arguments (no database).

Unannotated parameters take exactly what ``json.dumps`` takes (NaN and infinities
excluded: jsonb has no such values); annotated ones take what pydantic validates and
serialises to JSON, and are rebuilt to their type in the worker. Mistakes fail at
enqueue, with an ArgumentError naming the task.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any

import pytest
from pydantic import BaseModel

from pgqueue import ArgumentError, JobContext
from pgqueue.arguments import Signature


class Address(BaseModel):
    street: str
    zip_code: str


class User(BaseModel):
    id: int
    name: str
    address: Address | None = None


class Colour(Enum):
    RED = "red"
    BLUE = "blue"


def encoded(signature: Signature, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    result = signature.encode(args, kwargs)
    return json.loads(result.args), json.loads(result.kwargs)


def round_trip(signature: Signature, *args: Any, **kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """Encode as enqueue does, then decode as the worker does."""
    stored_args, stored_kwargs = encoded(signature, *args, **kwargs)
    return signature.decode(stored_args, stored_kwargs)


# -- binding -------------------------------------------------------------------------------


def plain(a, b, c=3, *, d=4):  # type: ignore[no-untyped-def]
    return a, b, c, d


def test_arguments_are_bound_to_the_signature() -> None:
    signature = Signature(plain, "plain")
    assert encoded(signature, 1, 2) == ([1, 2], {})
    # Stored as given (contract §8): binding only validates.
    assert encoded(signature, 1, b=2, d=5) == ([1], {"b": 2, "d": 5})
    assert encoded(signature, a=1, b=2, c=3) == ([], {"a": 1, "b": 2, "c": 3})


@pytest.mark.parametrize(
    ("args", "kwargs", "fragment"),
    [
        ((1,), {}, "missing a required argument: 'b'"),
        ((), {}, "missing a required argument: 'a'"),
        ((1, 2, 3, 4), {}, "too many positional arguments"),
        ((1, 2), {"e": 5}, "unexpected keyword argument 'e'"),
        ((1, 2), {"a": 1}, "multiple values for argument 'a'"),
    ],
)
def test_missing_and_unexpected_arguments_raise_at_encode(
    args: tuple[Any, ...], kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ArgumentError) as raised:
        Signature(plain, "app.plain").encode(args, kwargs)
    assert str(raised.value).startswith("task 'app.plain': ")
    assert fragment in str(raised.value)
    assert isinstance(raised.value, TypeError)  # ArgumentError is also a TypeError


# -- unannotated parameters: what json.dumps accepts ----------------------------------------


def untyped(value):  # type: ignore[no-untyped-def]
    return value


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -5, 2**70, 1.5, "text", "", [1, "a", None], {"k": [1, {"n": None}]},
     {"ünïcode": "✓"}],
)
def test_unannotated_parameters_take_json_values(value: Any) -> None:
    signature = Signature(untyped, "untyped")
    assert round_trip(signature, value) == ([value], {})


def test_unannotated_tuples_become_lists_as_in_json() -> None:
    assert round_trip(Signature(untyped, "untyped"), (1, 2)) == ([[1, 2]], {})


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, {1, 2}, frozenset(), datetime.now(UTC), date(2024, 1, 1),
     uuid.uuid4(), Decimal("1.5"), b"bytes", object(), Colour.RED,
     User(id=1, name="x"), {"nested": {1, 2}}, [math.nan], {(1, 2): "tuple key"},
     "NUL \x00 inside", {"key\x00": 1}],
)
def test_unannotated_parameters_refuse_what_json_dumps_refuses(value: Any) -> None:
    with pytest.raises(ArgumentError) as raised:
        Signature(untyped, "app.untyped").encode((value,), {})
    message = str(raised.value)
    assert "task 'app.untyped'" in message
    assert "JSON" in message
    assert "\n" not in message


@pytest.mark.parametrize("hint", [Any, object])
def test_any_and_object_annotations_count_as_unannotated(hint: Any) -> None:
    def task(value: Any) -> None: ...

    task.__annotations__["value"] = hint
    with pytest.raises(ArgumentError):
        Signature(task, "t").encode((datetime.now(UTC),), {})
    assert encoded(Signature(task, "t"), {"a": 1}) == ([{"a": 1}], {})


# -- annotated parameters: validated by pydantic, rebuilt in the worker ----------------------


def typed(user: User, when: datetime, ref: uuid.UUID, amount: Decimal, colour: Colour,
          tags: set[str], day: date, count: int = 1) -> None: ...


def test_annotated_values_are_validated_serialised_and_rebuilt() -> None:
    signature = Signature(typed, "typed")
    user = User(id=7, name="Ada", address=Address(street="Main St", zip_code="12345"))
    when = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    ref = uuid.UUID("12345678-1234-5678-1234-567812345678")
    stored_args, stored_kwargs = encoded(
        signature, user, when, ref, Decimal("9.99"), Colour.BLUE, {"b", "a"}, date(2024, 1, 2),
        count=3,
    )
    assert stored_args[0] == {"id": 7, "name": "Ada",
                              "address": {"street": "Main St", "zip_code": "12345"}}
    assert stored_args[1] == "2024-05-06T07:08:09Z"
    assert stored_args[2] == "12345678-1234-5678-1234-567812345678"
    assert stored_args[4] == "blue"
    assert sorted(stored_args[5]) == ["a", "b"]
    args, kwargs = signature.decode(stored_args, stored_kwargs)
    assert args[0] == user and isinstance(args[0], User)
    assert args[1] == when
    assert args[2] == ref
    assert args[3] == Decimal("9.99")
    assert args[4] is Colour.BLUE
    assert args[5] == {"a", "b"}
    assert args[6] == date(2024, 1, 2)
    assert [*args[7:], *kwargs.values()] == [3]


def test_models_may_be_given_as_dicts_and_are_validated() -> None:
    def task(user: User) -> None: ...

    signature = Signature(task, "t")
    args, _ = round_trip(signature, {"id": "5", "name": "Bob"})
    assert args == [User(id=5, name="Bob")]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (({"id": "x", "name": "n"},), "invalid argument 'user'"),
        (({"name": "n"},), "invalid argument 'user'"),
        (("not a user",), "invalid argument 'user'"),
    ],
)
def test_invalid_annotated_values_raise_at_encode(args: tuple[Any, ...], fragment: str) -> None:
    def task(user: User) -> None: ...

    with pytest.raises(ArgumentError) as raised:
        Signature(task, "app.task").encode(args, {})
    assert fragment in str(raised.value)
    assert str(raised.value).startswith("task 'app.task': ")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("annotation", "bad"),
    [(int, "seven"), (datetime, "yesterday"), (uuid.UUID, "not-a-uuid"), (float, math.nan),
     (float, math.inf), (list[int], [1, "x"]), (Colour, "green")],
)
def test_every_annotated_type_is_checked(annotation: Any, bad: Any) -> None:
    def task(value: Any) -> None: ...

    task.__annotations__["value"] = annotation
    with pytest.raises(ArgumentError, match="task 't'"):
        Signature(task, "t").encode((bad,), {})


def test_var_positional_and_var_keyword_annotations() -> None:
    def task(*when: datetime, **ids: uuid.UUID) -> None: ...

    signature = Signature(task, "t")
    first = datetime(2024, 1, 1, tzinfo=UTC)
    ref = uuid.uuid4()
    stored_args, stored_kwargs = encoded(signature, first, first, a=ref)
    assert stored_args == ["2024-01-01T00:00:00Z"] * 2
    assert stored_kwargs == {"a": str(ref)}
    assert signature.decode(stored_args, stored_kwargs) == ([first, first], {"a": ref})
    with pytest.raises(ArgumentError, match="invalid argument 'ids'"):
        signature.encode((), {"a": "nope"})


# -- the JobContext parameter ------------------------------------------------------------------


def test_the_context_parameter_is_not_an_argument() -> None:
    def task(x: int, ctx: JobContext) -> None: ...

    signature = Signature(task, "t")
    assert signature.context_parameter == "ctx"
    assert encoded(signature, 1) == ([1], {})
    with pytest.raises(ArgumentError, match="ctx"):
        signature.encode((1,), {"ctx": None})
    with pytest.raises(ArgumentError, match="too many positional arguments"):
        signature.encode((1, 2), {})


def test_without_a_context_parameter() -> None:
    assert Signature(plain, "plain").context_parameter is None


@pytest.mark.parametrize("position", ["first", "middle", "last", "keyword-only"])
def test_decode_places_the_context_wherever_its_parameter_is(position: str) -> None:
    context = object()
    namespace: dict[str, Any] = {"JobContext": JobContext}
    header = {
        "first": "ctx: JobContext, a, b=2",
        "middle": "a, ctx: JobContext, b=2",
        "last": "a, b=2, ctx: JobContext = None",
        "keyword-only": "a, b=2, *, ctx: JobContext",
    }[position]
    exec(f"def task({header}):\n    return a, b, ctx", namespace)
    task = namespace["task"]
    signature = Signature(task, "t")
    for given_args, given_kwargs in [((1,), {}), ((1, 5), {}), ((), {"a": 1, "b": 5})]:
        stored_args, stored_kwargs = encoded(signature, *given_args, **given_kwargs)
        args, kwargs = signature.decode(stored_args, stored_kwargs, context=context)
        a, b, ctx = task(*args, **kwargs)
        assert ctx is context
        assert a == 1
        assert b == (5 if given_args != (1,) else 2)


def test_decode_without_a_context_leaves_the_arguments_alone() -> None:
    def task(a, b=2):  # type: ignore[no-untyped-def]
        return a, b

    signature = Signature(task, "t")
    assert signature.decode([1], {"b": 3}) == ([1], {"b": 3})


def test_unresolvable_annotations_fail_with_the_task_name() -> None:
    def task(x: NotDefinedAnywhere) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(ArgumentError, match="cannot resolve the annotations of task 'bad'"):
        Signature(task, "bad").encode((1,), {})


# -- many at once (enqueue_many) -----------------------------------------------------------------


def test_encode_many_matches_encode_item_by_item() -> None:
    def task(user: User, n: int, note=None) -> None: ...  # type: ignore[no-untyped-def]

    signature = Signature(task, "t")
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((User(id=1, name="a"), 1), {}),
        (({"id": 2, "name": "b"}, "2", "x"), {}),
        ((), {"user": {"id": 3, "name": "c"}, "n": 3}),
    ]
    batch = signature.encode_many(calls)
    assert batch.count == 3
    many_args = json.loads(batch.args)
    many_kwargs = json.loads(batch.kwargs) or [{}] * 3
    for (args, kwargs), stored_args, stored_kwargs in zip(calls, many_args, many_kwargs,
                                                          strict=True):
        one = signature.encode(args, kwargs)
        assert (json.loads(one.args), json.loads(one.kwargs)) == (stored_args, stored_kwargs)


def test_encode_many_names_the_bad_item() -> None:
    def task(n: int) -> None: ...

    with pytest.raises(ArgumentError, match="invalid argument 'n'"):
        Signature(task, "t").encode_many([((1,), {}), (("x",), {})])

    def untyped_task(value):  # type: ignore[no-untyped-def]
        ...

    with pytest.raises(ArgumentError, match=r"item 1"):
        Signature(untyped_task, "u").encode_many([((1,), {}), ((math.nan,), {})])


def test_a_nul_character_is_refused_even_in_annotated_strings() -> None:
    def task(name: str) -> None: ...

    with pytest.raises(ArgumentError, match="NUL"):
        Signature(task, "t").encode(("a\x00b",), {})
    # the six characters backslash-u-0-0-0-0 are fine
    assert encoded(Signature(task, "t"), "\\u0000") == (["\\u0000"], {})


@pytest.mark.parametrize(
    ("annotation", "values"),
    [
        (int, [1, 2**70, -(2**70), 0]),
        (float, [0.1, 1e16, -0.0, 5e-324, 1.7976931348623157e308]),
        (str, ["\\u0000 as six characters", "é ☃ \u2028", 'quote " and \\ backslash', ""]),
        (int | None, [None, 1, None]),
        (datetime, [datetime(2024, 1, 1, tzinfo=UTC), "2024-02-03T04:05:06+01:00"]),
        (User, [User(id=1, name="a"), {"id": 2, "name": "b"}]),
        (list[float], [[1.5, 2], []]),
    ],
)
def test_positional_batches_encode_as_calls_one_by_one(annotation: Any, values: list[Any]) -> None:
    """The batch fast path writes JSON with pydantic in one call; it must store what
    encoding each call on its own stores."""

    def task(value: Any) -> None: ...

    task.__annotations__["value"] = annotation
    signature = Signature(task, "t")
    batch = signature.encode_positional_many([(value,) for value in values])
    assert batch is not None
    one_by_one = [json.loads(signature.encode((value,), {}).args) for value in values]
    assert json.loads(batch.args) == one_by_one


@pytest.mark.parametrize(
    ("annotation", "good", "bad", "message"),
    [(float, 1.0, math.nan, "JSON-serialisable"), (float, 1.0, math.inf, "JSON-serialisable"),
     (list[float], [1.0], [math.nan], "JSON-serialisable"), (str, "ok", "a\x00b", "NUL")],
)
def test_positional_batches_refuse_what_one_call_refuses(
    annotation: Any, good: Any, bad: Any, message: str
) -> None:
    """pydantic writes NaN and infinities as null and NUL as an escape; the fast path must
    not store those, and the general path then names the culprit."""

    def task(value: Any) -> None: ...

    task.__annotations__["value"] = annotation
    signature = Signature(task, "t")
    assert signature.encode_positional_many([(good,), (good,)]) is not None
    assert signature.encode_positional_many([(good,), (bad,)]) is None
    with pytest.raises(ArgumentError, match=message):
        signature.encode((bad,), {})
    with pytest.raises(ArgumentError, match=rf"item 1.*{message}"):
        signature.encode_many([((good,), {}), ((bad,), {})])
