"""Job rows in the text format of ``COPY ... FROM STDIN``, for bulk enqueue.

COPY loads rows without the per-row work of ``INSERT ... SELECT`` (no projection, no
function scan, and the heap takes the rows a page at a time): on a 20,000-job batch the
server spends about a third less time (docs/explanation/performance.md).

Text format: one line per row, fields separated by tabs, ``\\N`` for NULL, and a
backslash escaping a backslash, tab, newline or carriage return inside a field.
"""

from __future__ import annotations

from collections.abc import Sequence

NULL = b"\\N"

# Where one job's arguments end and the next one's begin in a compact JSON array of
# arrays: "[[1,"a"],[2,"b"]]".
_BETWEEN_JOBS = b"],["


def copy_field(value: str | None) -> bytes:
    """One field: ``value`` escaped for COPY's text format (None is NULL)."""
    if value is None:
        return NULL
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
        .replace("\r", "\\r").encode()
    )


def splits_into_jobs(args: str, count: int) -> bool:
    """Whether :func:`job_rows` can cut ``args`` into ``count`` lines.

    ``args`` is the compact JSON array holding each job's arguments array (what
    ``Signature.encode_many`` writes). Every boundary between two jobs reads ``],[``;
    when the text holds exactly ``count - 1`` of those, there is no other, and replacing
    them splits the jobs exactly. Nested arrays, or a string containing ``],[``, make
    the count differ.
    """
    return count >= 1 and args.count("],[") == count - 1


def job_rows(args: str, shared_fields: Sequence[bytes]) -> bytes:
    """COPY data for the columns ``(args, *shared)``, one line per job.

    ``args`` must pass :func:`splits_into_jobs`. The split is two passes over the text
    and no Python object per job: at 20,000 jobs, making those objects costs more than
    PostgreSQL's COPY itself. JSON writers escape every control character inside strings
    and compact JSON has no whitespace between tokens, so the only byte COPY would misread
    is the backslash. ``shared_fields`` (already escaped) end every line.
    """
    line_end = b"".join(b"\t" + field for field in shared_fields) + b"\n"
    body = args.encode()[1:-1].replace(b"\\", b"\\\\")
    return body.replace(_BETWEEN_JOBS, b"]" + line_end + b"[") + line_end
