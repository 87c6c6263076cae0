"""COPY text rows for bulk enqueue: escaping, and cutting a JSON array into one line per job.

The lines are read back here the way PostgreSQL's COPY text format reads them (split on
newline and tab, then undo the backslash escapes), so what goes in must come out.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from pgqueue.db.copy_rows import NULL, copy_field, job_rows, splits_into_jobs
from pgqueue.serialization import dumps

_COPY_ESCAPE = re.compile(rb"\\(.)")
_UNESCAPED = {b"t": b"\t", b"n": b"\n", b"r": b"\r", b"\\": b"\\"}


def read_copy_field(field: bytes) -> str | None:
    """What COPY's text format stores for ``field``."""
    if field == NULL:
        return None
    return _COPY_ESCAPE.sub(lambda m: _UNESCAPED[m.group(1)], field).decode()


def read_copy_lines(data: bytes) -> list[list[str | None]]:
    assert data.endswith(b"\n")
    return [[read_copy_field(f) for f in line.split(b"\t")] for line in data[:-1].split(b"\n")]


@pytest.mark.parametrize(
    "value", ["plain", "", "tab\there", "new\nline", "cr\rhere", "back\\slash", "\\N", "é ☃"]
)
def test_copy_field_round_trips_through_copy_text(value: str) -> None:
    field = copy_field(value)
    assert b"\t" not in field and b"\n" not in field and b"\r" not in field
    assert read_copy_field(field) == value


def test_copy_field_writes_none_as_null() -> None:
    assert copy_field(None) == NULL
    assert read_copy_field(copy_field("\\N")) == "\\N"  # the text, not NULL


AWKWARD_JOBS: list[list[Any]] = [
    [1, "two"],
    [],
    ["back\\slash", "tab\t", "new\nline", "cr\r", 'quote"', "\u2028", "é"],
    [None, True, False, 1.5, -3, 2**70],
    [{"nested": {"list": [1, 2]}, "k": "]"}],
    ["[", "]", ",", "],", ",["],
    [""],
]


def test_job_rows_cut_the_array_into_one_line_per_job() -> None:
    args = dumps(AWKWARD_JOBS)
    assert splits_into_jobs(args, len(AWKWARD_JOBS))
    shared = [copy_field("queue\twith tab"), b"5", NULL]
    lines = read_copy_lines(job_rows(args, shared))
    assert len(lines) == len(AWKWARD_JOBS)
    for line, expected in zip(lines, AWKWARD_JOBS, strict=True):
        assert line[1:] == ["queue\twith tab", "5", None]
        assert line[0] is not None
        assert json.loads(line[0]) == expected


def test_job_rows_of_a_single_job() -> None:
    assert read_copy_lines(job_rows("[[1]]", [b"x"])) == [["[1]", "x"]]


@pytest.mark.parametrize(
    "jobs",
    [
        [[[1], [2]]],  # a job whose argument holds two arrays side by side
        [["a],[b"], [1]],  # a string that reads like a boundary
        [[[1]], [[2], [3]]],
    ],
)
def test_arrays_that_do_not_cut_cleanly_are_refused(jobs: list[list[Any]]) -> None:
    assert not splits_into_jobs(dumps(jobs), len(jobs))


def test_the_count_must_match() -> None:
    assert splits_into_jobs("[[1],[2]]", 2)
    assert not splits_into_jobs("[[1],[2]]", 3)
    assert not splits_into_jobs("[[1],[2]]", 1)
    assert not splits_into_jobs("[]", 0)
