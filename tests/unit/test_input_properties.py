"""Properties of the API boundary, without a database: every input is accepted (and
keeps its value) or refused with a one-line error naming what was wrong.

The database round trips of the same inputs are in
tests/integration/test_input_round_trips.py; the strategies in tests/_strategies.py.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgqueue import ArgumentError, ConfigurationError, Retry, Snooze
from pgqueue.arguments import Signature
from pgqueue.bounds import MAX_DELAY_SECONDS, MAX_SCHEMA_NAME_LENGTH
from pgqueue.cli.logs import LineFormatter
from pgqueue.options import ENQUEUE_OPTIONS, JobOptions, queue_name, task_name
from pgqueue.serialization import dumps, storable_text
from pgqueue.settings import parse_duration, validate_schema_name
from tests import _strategies as s


def one_line(exc: BaseException) -> str:
    message = str(exc)
    assert message and "\n" not in message, repr(message)
    return message


@given(s.durations)
def test_durations_are_finite_and_in_range_or_refused(value: Any) -> None:
    try:
        seconds = parse_duration(value, what="run_in")
    except ConfigurationError as exc:
        assert "run_in" in one_line(exc)
        return
    assert math.isfinite(seconds) and 0 <= seconds <= MAX_DELAY_SECONDS


@given(s.durations)
def test_retry_and_snooze_delays_are_in_range_or_refused(value: Any) -> None:
    for signal, attribute in ((Retry, "delay"), (Snooze, "seconds")):
        try:
            made = signal(value)
        except ValueError as exc:
            assert signal.__name__ in one_line(exc)
            continue
        delay = getattr(made, attribute)
        assert math.isfinite(delay) and 0 <= delay <= MAX_DELAY_SECONDS


@given(s.durations, s.durations, s.durations)
def test_duration_options_are_stored_in_range_or_refused(
    timeout: Any, result_ttl: Any, run_in: Any
) -> None:
    for name, value in (("timeout", timeout), ("result_ttl", result_ttl), ("run_in", run_in)):
        try:
            options = JobOptions().with_options({name: value}, ENQUEUE_OPTIONS)
        except ConfigurationError as exc:
            assert name in one_line(exc)
            continue
        stored = getattr(options, name)
        assert math.isfinite(stored) and 0 <= stored <= MAX_DELAY_SECONDS


@given(s.names)
def test_queue_and_task_names_are_printable_or_refused(value: str) -> None:
    for check, field in ((queue_name, "queue"), (task_name, "task name")):
        try:
            accepted = check(value)
        except ConfigurationError as exc:
            assert field in one_line(exc)
            continue
        assert accepted == value and value.isprintable() and value == value.strip()
        assert storable_text(value) == value


@given(s.idempotency_keys)
def test_idempotency_keys_are_storable_and_small_or_refused(value: str) -> None:
    try:
        options = JobOptions().with_options({"idempotency_key": value}, ENQUEUE_OPTIONS)
    except ConfigurationError as exc:
        assert "idempotency_key" in one_line(exc)
        return
    assert options.idempotency_key == value
    assert len(value.encode()) <= 1024 and storable_text(value) == value


@given(s.schema_names)
def test_schema_names_are_short_identifiers_or_refused(value: str) -> None:
    try:
        validate_schema_name(value)
    except ConfigurationError as exc:
        assert "schema name" in one_line(exc)
        return
    assert value.isidentifier() and value.isascii() and len(value) <= MAX_SCHEMA_NAME_LENGTH


@given(s.task_arguments)
def test_task_arguments_encode_to_storable_json_or_are_refused(
    arguments: tuple[list[Any], dict[str, Any]],
) -> None:
    def task(*args: Any, **kwargs: Any) -> None: ...

    positional, keywords = arguments
    try:
        encoded = Signature(task, "t").encode(tuple(positional), keywords)
    except ArgumentError as exc:
        assert one_line(exc).startswith("task 't'")
        return
    for text in (encoded.args, encoded.kwargs):
        assert storable_text(text) == text and "\\u0000" not in text
    assert s.same_json(json.loads(encoded.args), s.json_normalized(positional))
    assert s.same_json(json.loads(encoded.kwargs), s.json_normalized(keywords))


@given(s.json_values)
def test_dumps_writes_jsonb_safe_text_or_refuses(value: Any) -> None:
    try:
        text = dumps(value)
    except (TypeError, ValueError) as exc:
        one_line(exc)
        return
    assert "e+" not in text.replace('"', "'") or any(
        "e+" in key for key in _strings(value)), text
    assert s.same_json(json.loads(text), s.json_normalized(value))


@given(s.error_texts)
def test_storable_text_changes_only_what_text_cannot_hold(value: str) -> None:
    stored = storable_text(value)
    stored.encode("utf-8")
    assert "\x00" not in stored
    if "\x00" not in value and not any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        assert stored == value


@given(s.error_texts, s.names)
def test_a_log_record_is_one_line_whatever_its_text(message: str, task: str) -> None:
    record = logging.LogRecord("pgqueue.worker", logging.ERROR, __file__, 1,
                               "Job %s (%s) is dead: %s", (7, task, message), None)
    record.task = task
    line = LineFormatter().format(record)
    assert "\n" not in line and "\r" not in line
    assert all(c.isprintable() for c in line), repr(line)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    if isinstance(value, dict):
        return [*value, *(text for item in value.values() for text in _strings(item))]
    return []


@pytest.mark.parametrize("text", ["\ud800", "a\x00b", "x" * 10])
def test_storable_text_examples(text: str) -> None:
    assert storable_text(text).encode()


@given(st.lists(st.tuples(st.integers(-(2**40), 2**40), s.json_values), max_size=5))
def test_batches_encode_like_single_calls(items: list[tuple[int, Any]]) -> None:
    def task(n: int, value: Any) -> None: ...

    signature = Signature(task, "t")
    try:
        batch = signature.encode_many([(item, {}) for item in items])
    except ArgumentError as exc:
        one_line(exc)
        with pytest.raises(ArgumentError):
            for item in items:
                signature.encode(item, {})
        return
    singles = [json.loads(signature.encode(item, {}).args) for item in items]
    assert json.loads(batch.args) == singles
