"""The typed context every command works from: where the database is and how to print.

Options given before the command (``pgq --dsn X jobs list``) and after it
(``pgq jobs list --dsn X``) both land here, so commands never read the environment
themselves: DSN resolution (``--dsn`` → ``PGQUEUE_DSN`` → ``DATABASE_URL``) is the
library's job, and it only happens when a command actually needs the database.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import typer

from pgqueue import Queue
from pgqueue.settings import EMBEDDED

from .loading import load_queue
from .options import DsnOption, EmbeddedOption, JsonOption, SchemaOption


@dataclass(frozen=True)
class CliContext:
    """Connection and output settings shared by every command."""

    dsn: str | None = None
    embedded: bool = False
    schema: str | None = None
    json: bool = False

    def merged(
        self,
        *,
        dsn: str | None = None,
        embedded: bool = False,
        schema: str | None = None,
        json: bool = False,
    ) -> CliContext:
        """This context with a command's own options laid over the group's."""
        result = replace(
            self,
            dsn=dsn if dsn is not None else self.dsn,
            embedded=embedded or self.embedded,
            schema=schema if schema is not None else self.schema,
            json=json or self.json,
        )
        if result.dsn is not None and result.embedded:
            raise typer.BadParameter(
                "give either --dsn or --embedded, not both", param_hint="'--dsn'"
            )
        return result

    @property
    def explicit_dsn(self) -> str | None:
        """The DSN asked for on the command line (``"embedded"`` for ``--embedded``), if any."""
        return EMBEDDED if self.embedded else self.dsn

    def queue(self) -> Queue:
        """A Queue for this context; the DSN is resolved lazily, on first database use."""
        return Queue(dsn=self.explicit_dsn, schema=self.schema)

    def configure(self, queue: Queue) -> Queue:
        """Point a user's Queue (from ``-A``) where the command line says, if it says so."""
        if self.explicit_dsn is not None or self.schema is not None:
            queue.configure(dsn=self.explicit_dsn, schema=self.schema)
        return queue

    @contextmanager
    def session(self, app: str | None = None) -> Iterator[Queue]:
        """A Queue ready for data commands, closed afterwards.

        ``app`` (``-A``) loads the user's Queue so that its registered tasks validate
        arguments. The schema check first is what makes an unreachable database fail at
        once in one line (the pool would retry for 30 s) and an unmigrated one say
        ``run pgq migrate`` instead of "relation does not exist".
        """
        queue = self.configure(load_queue(app)) if app else self.queue()
        try:
            queue.check_schema()
            yield queue
        finally:
            queue.close()


def cli_context(
    ctx: typer.Context,
    *,
    dsn: str | None = None,
    embedded: bool = False,
    schema: str | None = None,
    json: bool = False,
) -> CliContext:
    """The context for the running command: the root's options merged with its own."""
    base = ctx.find_object(CliContext) or CliContext()
    return base.merged(dsn=dsn, embedded=embedded, schema=schema, json=json)


def _option(name: str, annotation: object, default: object) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


# The options every command that reaches a database takes (also before the command, on
# the root group), and the one of commands that print data.
_CONNECTION = (
    _option("dsn", DsnOption, None),
    _option("embedded", EmbeddedOption, False),
    _option("schema", SchemaOption, None),
)
_JSON = _option("as_json", JsonOption, False)
_CTX = _option("ctx", typer.Context, inspect.Parameter.empty)

Body = Callable[..., None]


def connected(*, json: bool) -> Callable[[Body], Body]:
    """Give a command (or group) ``--dsn``, ``--embedded``, ``--schema`` and, with
    ``json=True``, ``--json``; its first parameter receives the :class:`CliContext` they
    make, merged with the enclosing group's, instead of each command declaring them again.

    Typer reads a command's options from its signature, so the wrapper presents the
    command's own parameters followed by these, with their annotations evaluated (the
    modules use postponed annotations, which typer would otherwise resolve in the wrong
    module).
    """
    shared = (*_CONNECTION, _JSON) if json else _CONNECTION

    def decorate(body: Body) -> Body:
        own = list(inspect.signature(body, eval_str=True).parameters.values())[1:]
        # A body that declares ``ctx`` receives the click context too (pgq worker
        # --processes reads which options came from the command line).
        wants_ctx = any(p.name == "ctx" for p in own)
        own = [p for p in own if p.name != "ctx"]
        parameters = [
            _CTX, *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own), *shared
        ]

        @functools.wraps(body)
        def command(ctx: typer.Context, **given: Any) -> None:
            context = cli_context(
                ctx, dsn=given.pop("dsn"), embedded=given.pop("embedded"),
                schema=given.pop("schema"), json=given.pop("as_json", False),
            )
            # Where the commands of a group (the root's, given options before the
            # command) find it.
            ctx.obj = context
            body(context, **given, **({"ctx": ctx} if wants_ctx else {}))

        command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in parameters}
        del command.__wrapped__
        return command

    return decorate
