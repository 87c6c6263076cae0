"""Names derived from the schema name: the NOTIFY channel and advisory-lock keys."""

from __future__ import annotations

import zlib


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel on which a schema announces ready jobs."""
    return f"{schema}_jobs"


# The payload on that channel when a queue's limits change (Queue.set_queue): workers
# look for limits again at once. No list of queue names starts with a comma.
LIMITS_CHANGED = ",limits"


def advisory_lock_key(schema: str, purpose: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_*`` locks owned by this schema."""
    high = zlib.crc32(schema.encode())
    low = zlib.crc32(purpose.encode())
    value = (high << 32) | low
    return value - (1 << 64) if value >= (1 << 63) else value
