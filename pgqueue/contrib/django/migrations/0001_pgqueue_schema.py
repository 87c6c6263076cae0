"""pgqueue's tables, by pgqueue's own migrations (alembic), to the revision of the
pgqueue installed when this runs. After upgrading pgqueue, run ``pgq migrate`` (or
``manage.py migrate pgqueue zero`` then ``migrate``, which drops the jobs) for newer
revisions."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def _schemas(alias: str) -> list[str]:
    """The schemas of the PgQueueBackends that enqueue through database ``alias``."""
    from django.conf import settings

    found = []
    for params in getattr(settings, "TASKS", {}).values():
        if params.get("BACKEND") != "pgqueue.contrib.django.PgQueueBackend":
            continue
        options = params.get("OPTIONS", {})
        if options.get("DSN") is None and options.get("DATABASE", "default") == alias:
            found.append(options.get("SCHEMA", "pgqueue"))
    return sorted(set(found))


def create_schema(apps: Any, schema_editor: Any) -> None:
    from pgqueue.contrib.django.backend import database_dsn
    from pgqueue.db.migrate import upgrade

    alias = schema_editor.connection.alias
    for schema in _schemas(alias):
        upgrade(database_dsn(alias), schema)


def drop_schema(apps: Any, schema_editor: Any) -> None:
    from pgqueue.contrib.django.backend import database_dsn
    from pgqueue.db.migrate import downgrade

    alias = schema_editor.connection.alias
    for schema in _schemas(alias):
        downgrade(database_dsn(alias), schema, "base")


class Migration(migrations.Migration):  # type: ignore[misc]
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunPython(create_schema, drop_schema)]
