"""Binding, validating and rebuilding task arguments.

At enqueue time the arguments are bound to the task's signature (so missing or unexpected
arguments fail in the caller, not in the worker), annotated parameters are validated and
serialised by pydantic, and everything else must be plain JSON. In the worker the same
signature rebuilds annotated values (models, datetimes, UUIDs...) from their JSON form.
A parameter annotated with :class:`~pgqueue.context.JobContext` is never an argument: the
worker injects the context there.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import TypeAdapter, ValidationError

from pgqueue.errors import ArgumentError
from pgqueue.serialization import dumps

_SKIP = (inspect.Parameter.empty, typing.Any, object)


@dataclass(frozen=True)
class EncodedArguments:
    """Arguments ready for the jobs table: JSON text for ``args`` and ``kwargs``."""

    args: str
    kwargs: str


class Signature:
    """What pgqueue needs to know about a task function's parameters."""

    def __init__(self, func: Callable[..., Any], task_name: str) -> None:
        self.func = func
        self.task_name = task_name

    @cached_property
    def _resolved(self) -> tuple[inspect.Signature, str | None, dict[str, TypeAdapter[Any]]]:
        # Resolved lazily: forward references in annotations may only exist once the
        # user's module has finished importing.
        from pgqueue.context import JobContext

        signature = inspect.signature(self.func)
        try:
            hints = typing.get_type_hints(self.func)
        except Exception as exc:
            raise ArgumentError(
                f"cannot resolve the annotations of task {self.task_name!r}: {exc}"
            ) from None
        context_name: str | None = None
        adapters: dict[str, TypeAdapter[Any]] = {}
        parameters = []
        for name, parameter in signature.parameters.items():
            annotation = hints.get(name, inspect.Parameter.empty)
            if annotation is JobContext:
                context_name = name
                continue
            parameters.append(parameter)
            if annotation not in _SKIP:
                adapters[name] = TypeAdapter(annotation)
        return signature.replace(parameters=parameters), context_name, adapters

    @property
    def context_parameter(self) -> str | None:
        """Name of the parameter that receives the JobContext, if any."""
        return self._resolved[1]

    def encode(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> EncodedArguments:
        """Bind, validate and serialise arguments, or raise ArgumentError in one line."""
        signature, _, adapters = self._resolved
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentError(f"task {self.task_name!r}: {exc}") from None
        if adapters:
            for name, value in bound.arguments.items():
                adapter = adapters.get(name)
                if adapter is not None:
                    bound.arguments[name] = self._to_json(name, adapter, value, signature)
        try:
            return EncodedArguments(dumps(list(bound.args)), dumps(bound.kwargs))
        except (TypeError, ValueError) as exc:
            raise ArgumentError(
                f"task {self.task_name!r}: arguments must be JSON-serialisable ({exc}); "
                "pass JSON types or annotate the parameter with a type pydantic can serialise"
            ) from None

    def _to_json(
        self, name: str, adapter: TypeAdapter[Any], value: Any, signature: inspect.Signature
    ) -> Any:
        kind = signature.parameters[name].kind
        try:
            if kind is inspect.Parameter.VAR_POSITIONAL:
                return tuple(self._one(adapter, item) for item in value)
            if kind is inspect.Parameter.VAR_KEYWORD:
                return {key: self._one(adapter, item) for key, item in value.items()}
            return self._one(adapter, value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ())) or name
            raise ArgumentError(
                f"task {self.task_name!r}: invalid argument {name!r} "
                f"({where}: {first.get('msg', 'invalid value')})"
            ) from None

    @staticmethod
    def _one(adapter: TypeAdapter[Any], value: Any) -> Any:
        return adapter.dump_python(adapter.validate_python(value), mode="json")

    def decode(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Rebuild annotated arguments from their stored JSON form (in the worker)."""
        signature, _, adapters = self._resolved
        if not adapters:
            return args, kwargs
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            adapter = adapters.get(name)
            if adapter is None:
                continue
            kind = signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                bound.arguments[name] = tuple(adapter.validate_python(v) for v in value)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                bound.arguments[name] = {k: adapter.validate_python(v) for k, v in value.items()}
            else:
                bound.arguments[name] = adapter.validate_python(value)
        return list(bound.args), dict(bound.kwargs)
