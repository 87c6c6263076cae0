"""Cron expressions and time zones: parsing them, refusing bad ones, computing ticks.

A schedule says *when* in a standard 5-field cron expression (minute, hour, day of
month, month, day of week) or one of the aliases below, read in a time zone (UTC unless
given). The arithmetic is `cronsim <https://pypi.org/project/cronsim/>`_'s, which
follows Debian cron, including its daylight-saving rules (docs/guides/periodic.md
"Daylight saving time" says what they mean for a schedule):

* a schedule whose minute *and* hour fields are both fixed (neither starts with ``*``:
  ``30 2 * * *``, ``0 1-3 * * 1-5``) is read in local wall-clock time. A tick that falls
  in the hour skipped when clocks go forward runs at the first minute that exists after
  it (``30 2 * * *`` runs at 03:00 on that day); a tick in the hour that repeats when
  clocks go back runs once, at its first occurrence;
* any other schedule (``*/5 * * * *``, ``15 * * * *``) follows real elapsed time: no
  tick in the skipped hour (it does not exist), and ticks in both passes of the
  repeated hour.

Every tick is returned as an aware datetime in UTC: the database stores it so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from pgqueue.bounds import short_repr
from pgqueue.errors import ConfigurationError

__all__ = ["ALIASES", "Cron", "parse_cron", "time_zone"]

# The @-aliases of Vixie cron, as the 5-field expressions they stand for.
ALIASES: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# What the error messages offer instead of a bad value.
CRON_FORMS: Final = (
    "5 fields 'minute hour day-of-month month day-of-week' such as '*/5 * * * *' or "
    "'0 3 * * 1-5', or one of " + ", ".join(ALIASES)
)
TZ_FORMS: Final = "an IANA time zone name such as 'UTC' or 'Europe/Paris'"


@dataclass(frozen=True)
class Cron:
    """A valid cron expression (as written) read in a valid time zone (its IANA name)."""

    expression: str
    tz: str

    @property
    def fields(self) -> str:
        """The 5-field form (an alias expanded)."""
        return ALIASES.get(self.expression.lower(), self.expression)

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment`` (an aware datetime), in UTC."""
        local = moment.astimezone(ZoneInfo(self.tz))
        return next(CronSim(self.fields, local)).astimezone(UTC)

    def ticks(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` ticks after ``after``, in UTC (for tests and docs)."""
        found: list[datetime] = []
        for _ in range(count):
            after = self.next_after(after)
            found.append(after)
        return found


def time_zone(tz: object) -> str:
    """``tz`` if it names a time zone this machine knows; else one line saying what is
    accepted. None means UTC."""
    if tz is None:
        return "UTC"
    if not isinstance(tz, str) or not tz or tz != tz.strip():
        raise ConfigurationError(f"invalid time zone {short_repr(tz)}: use {TZ_FORMS}")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigurationError(
            f"unknown time zone {short_repr(tz)}: use {TZ_FORMS}") from None
    return tz


def parse_cron(expression: object, tz: object = None) -> Cron:
    """A :class:`Cron` for ``expression`` in ``tz``, or ConfigurationError in one line
    naming the value and the accepted forms.

    Exactly five fields (cronsim also takes a sixth, for seconds: pgqueue does not, a
    tick every second is a job every second) or an alias; an expression that can never
    match (``0 0 31 2 *``) is refused too, since it would never run.
    """
    zone = time_zone(tz)
    if not isinstance(expression, str):
        raise ConfigurationError(
            f"invalid cron expression {short_repr(expression)}: use {CRON_FORMS}")
    written = " ".join(expression.split())
    fields = ALIASES.get(written.lower(), written)
    if written.startswith("@") and written.lower() not in ALIASES:
        raise ConfigurationError(
            f"unknown cron alias {short_repr(expression)}: use {CRON_FORMS}")
    if len(fields.split()) != 5:
        raise ConfigurationError(
            f"invalid cron expression {short_repr(expression)} "
            f"({len(fields.split())} fields): use {CRON_FORMS}")
    try:
        next(CronSim(fields, datetime(2026, 1, 1, tzinfo=UTC)))
    except CronSimError as exc:
        raise ConfigurationError(
            f"invalid cron expression {short_repr(expression)} ({exc}): use {CRON_FORMS}"
        ) from None
    except StopIteration:
        raise ConfigurationError(
            f"cron expression {short_repr(expression)} never matches a date: use "
            f"{CRON_FORMS}") from None
    return Cron(written, zone)
