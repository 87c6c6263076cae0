"""Where pgqueue's settings come from: DSN resolution, durations and schema names.

The rules are the contract's: an explicit DSN wins, then ``PGQUEUE_DSN``, then
``DATABASE_URL``; ``"embedded"`` means the local embedded server under ``.pgqueue/``.
Nothing here falls back silently: a missing or malformed value raises
:class:`~pgqueue.errors.ConfigurationError` with a one-line message that says how to fix it.
"""

from __future__ import annotations

import re
from datetime import timedelta

from psycopg.conninfo import conninfo_to_dict
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from pgqueue.errors import ConfigurationError

EMBEDDED = "embedded"

_SQLALCHEMY_SCHEME = re.compile(r"^(postgres(?:ql)?)\+[a-z0-9_]+://", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


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


def normalize_dsn(dsn: str) -> str:
    """Accept libpq URLs, key=value strings and SQLAlchemy URLs; return what psycopg takes.

    ``postgresql+psycopg://`` and friends lose their driver suffix. The result is checked
    by libpq's own parser so that a malformed DSN fails here, at once, in one line.
    """
    if dsn == EMBEDDED:
        return dsn
    cleaned = _SQLALCHEMY_SCHEME.sub(lambda m: m.group(1) + "://", dsn)
    if "://" in cleaned and not cleaned.lower().startswith(("postgresql://", "postgres://")):
        scheme = cleaned.split("://", 1)[0]
        raise ConfigurationError(
            f"malformed DSN: scheme {scheme!r} is not PostgreSQL; "
            "use postgresql://user@host:5432/dbname or key=value pairs"
        )
    try:
        params = conninfo_to_dict(cleaned)
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
    """Schema names are plain identifiers so that channel and lock names derive from them."""
    if not _SCHEMA_NAME.match(name):
        raise ConfigurationError(
            f"invalid schema name {name!r}: use letters, digits and underscores "
            "(not starting with a digit, at most 63 characters)"
        )
    return name


def parse_duration(value: str | float | int | timedelta, *, what: str = "duration") -> float:
    """Seconds from ``30s``, ``15m``, ``1h``, ``7d``, ``250ms``, plain seconds or a timedelta."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ConfigurationError(
                f"invalid {what} {value!r}: use plain seconds or a number with s, m, h or d "
                "(e.g. 30s, 15m, 1h, 7d)"
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[(match.group(2) or "s").lower()]
    else:
        raise ConfigurationError(f"invalid {what} {value!r}: expected seconds or a duration")
    if seconds < 0:
        raise ConfigurationError(f"invalid {what} {value!r}: must not be negative")
    return seconds

