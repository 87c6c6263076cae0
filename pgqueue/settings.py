"""Where pgqueue's settings come from: DSN resolution, durations and schema names.

The rules are the contract's: an explicit DSN wins, then ``PGQUEUE_DSN``, then
``DATABASE_URL``; ``"embedded"`` means the local embedded server under ``.pgqueue/``.
Nothing here falls back silently: a missing or malformed value raises
:class:`~pgqueue.errors.ConfigurationError` with a one-line message that says how to fix it.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from urllib.parse import unquote

from psycopg.conninfo import conninfo_to_dict
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from pgqueue.bounds import (
    CHANNEL_SUFFIX,
    MAX_DELAY_SECONDS,
    MAX_SCHEMA_NAME_LENGTH,
    short_repr,
)
from pgqueue.errors import ConfigurationError

EMBEDDED = "embedded"

_SQLALCHEMY_SCHEME = re.compile(r"^(postgres(?:ql)?)\+[a-z0-9_]+://", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EnvironmentSettings(BaseSettings):
    """The environment variables the library reads (and nothing else; ``pgq`` also reads
    ``PGQUEUE_APP``, as the default of its ``-A`` option)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False)

    pgqueue_dsn: str | None = Field(default=None)
    database_url: str | None = Field(default=None)
    pgqueue_schema: str | None = Field(default=None)


def resolve_dsn(explicit: str | None = None) -> str:
    """Return the DSN to use: ``explicit`` → ``PGQUEUE_DSN`` → ``DATABASE_URL``.

    Returns :data:`EMBEDDED` unchanged when asked for the embedded server; callers turn
    it into a real DSN with :func:`pgqueue.embedded.embedded_dsn` so that merely
    resolving settings never starts a server.
    """
    env = EnvironmentSettings()
    for candidate in (explicit, env.pgqueue_dsn, env.database_url):
        if candidate and candidate.strip():
            return normalize_dsn(candidate.strip())
    raise ConfigurationError(
        "no database configured: pass --dsn (or dsn=...), set PGQUEUE_DSN or DATABASE_URL, "
        "or use --embedded (dsn='embedded') for a local embedded PostgreSQL"
    )


# pgqueue's own DSN option, ``pool_mode=transaction`` (URL query or key=value): the DSN
# leads to a pooler in transaction mode (PgBouncer's pool_mode), so pgqueue must not
# prepare statements on its connections. libpq knows no such keyword, so it is taken out
# before libpq sees the DSN (:func:`split_pool_mode`).
POOL_MODE_OPTION = "pool_mode"
POOL_MODES = ("session", "transaction")
_POOL_MODE_IN_URL = re.compile(r"(?<=[?&])pool_mode=([^&#]*)&?|[?&]pool_mode=([^&#]*)$")
_POOL_MODE_IN_PAIRS = re.compile(r"(?:^|\s)pool_mode\s*=\s*('(?:[^'\\]|\\.)*'|\S*)")


def split_pool_mode(dsn: str) -> tuple[str, str | None]:
    """``dsn`` without pgqueue's ``pool_mode`` option, and the option's value (or None).

    ``pool_mode=transaction`` tells pgqueue that the DSN goes through a pooler in
    transaction mode (PgBouncer): its connections then never prepare statements on the
    server (docs/guides/deployment.md). ``session`` is the default behaviour. Statement
    pooling cannot run pgqueue's multi-statement transactions and is refused.
    """
    if POOL_MODE_OPTION not in dsn:
        return dsn, None
    pattern = _POOL_MODE_IN_URL if "://" in dsn else _POOL_MODE_IN_PAIRS
    match = pattern.search(dsn)
    if match is None:
        return dsn, None
    raw = next(group for group in match.groups() if group is not None)
    value = unquote(raw.strip("'")).strip().lower()
    if value not in POOL_MODES:
        raise ConfigurationError(
            f"invalid DSN option pool_mode={raw!r}: use pool_mode=transaction behind a "
            "pooler in transaction mode, or session (the default); statement pooling "
            "cannot run pgqueue's transactions"
        )
    stripped = (dsn[: match.start()] + dsn[match.end():]).strip()
    return stripped.rstrip("?&"), value


def normalize_dsn(dsn: str) -> str:
    """Accept libpq URLs, key=value strings and SQLAlchemy URLs; return what psycopg takes.

    ``postgresql+psycopg://`` and friends lose their driver suffix. The result is checked
    by libpq's own parser so that a malformed DSN fails here, at once, in one line. The
    ``pool_mode`` option (see :func:`split_pool_mode`) is checked and kept: the Queue
    takes it out when it connects.
    """
    if dsn == EMBEDDED:
        return dsn
    cleaned = _SQLALCHEMY_SCHEME.sub(lambda m: m.group(1) + "://", dsn)
    checked, _ = split_pool_mode(cleaned)
    if "://" in cleaned and not cleaned.lower().startswith(("postgresql://", "postgres://")):
        scheme = cleaned.split("://", 1)[0]
        raise ConfigurationError(
            f"malformed DSN: scheme {scheme!r} is not PostgreSQL; "
            "use postgresql://user@host:5432/dbname or key=value pairs"
        )
    try:
        params = conninfo_to_dict(checked)
    except Exception as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigurationError(
            f"malformed DSN ({message}); use postgresql://user@host:5432/dbname "
            "or key=value pairs"
        ) from None
    # libpq's parser takes any port text; connecting would then fail with an error that a
    # worker retries for --connect-timeout. A port is a number (one per host): say so now.
    port = str(params.get("port") or "")
    if not all(part.strip().isdigit() for part in port.split(",") if part.strip()):
        raise ConfigurationError(
            f"malformed DSN (port {port!r} is not a number); use "
            "postgresql://user@host:5432/dbname or key=value pairs"
        )
    return cleaned


def resolve_schema(explicit: str | None = None) -> str:
    """Return the schema name: ``explicit`` → ``PGQUEUE_SCHEMA`` → ``pgqueue``."""
    name = explicit or EnvironmentSettings().pgqueue_schema or "pgqueue"
    return validate_schema_name(name)


def validate_schema_name(name: str) -> str:
    """Schema names are plain identifiers so that channel and lock names derive from them.

    At most 58 characters: the wake-up channel ``<schema>_jobs`` must fit PostgreSQL's
    63-byte limit on names, or every enqueue would fail in the trigger's NOTIFY.
    """
    if not isinstance(name, str) or not _SCHEMA_NAME.match(name):
        raise ConfigurationError(
            f"invalid schema name {short_repr(name)}: use letters, digits and underscores "
            f"(not starting with a digit, at most {MAX_SCHEMA_NAME_LENGTH} characters)"
        )
    if len(name) > MAX_SCHEMA_NAME_LENGTH:
        raise ConfigurationError(
            f"invalid schema name {name!r}: {len(name)} characters; at most "
            f"{MAX_SCHEMA_NAME_LENGTH}, so that its wake-up channel {name + CHANNEL_SUFFIX!r} "
            "fits PostgreSQL's 63-character limit"
        )
    return name


def parse_duration(
    value: str | float | int | timedelta,
    *,
    what: str = "duration",
    maximum: float = MAX_DELAY_SECONDS,
) -> float:
    """Seconds from ``30s``, ``15m``, ``1h``, ``7d``, ``250ms``, plain seconds or a timedelta.

    The result is finite and from 0 to ``maximum`` (100 years unless the caller's column
    holds less): NaN would mean "no limit" to some readers and an error to PostgreSQL,
    and an infinite or huge delay overflows ``now() + interval``.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond float's range
            seconds = math.inf
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ConfigurationError(
                f"invalid {what} {value!r}: use plain seconds or a number with s, m, h or d "
                "(e.g. 30s, 15m, 1h, 7d)"
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[(match.group(2) or "s").lower()]
    else:
        raise ConfigurationError(
            f"invalid {what} {short_repr(value)}: expected seconds or a duration"
        )
    if seconds < 0:
        raise ConfigurationError(f"invalid {what} {short_repr(value)}: must not be negative")
    if not math.isfinite(seconds) or seconds > maximum:
        raise ConfigurationError(
            f"invalid {what} {short_repr(value)}: use a finite duration from 0 to "
            f"{maximum:.0f} seconds (about {maximum / 31_536_000:.0f} years)"
        )
    return seconds

