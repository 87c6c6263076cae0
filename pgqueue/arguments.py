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

from pgqueue.bounds import short_repr
from pgqueue.errors import ArgumentError
from pgqueue.serialization import dumps

_SKIP = (inspect.Parameter.empty, typing.Any, object)


@dataclass(frozen=True)
class EncodedBatch:
    """Arguments of many jobs: JSON arrays with one element per job (kwargs may be ``[]``,
    meaning every job has no keyword arguments)."""

    args: str
    kwargs: str
    count: int


@dataclass(frozen=True)
class EncodedArguments:
    """Arguments ready for the jobs table: JSON text for ``args`` and ``kwargs``."""

    args: str
    kwargs: str


def call_arguments(args: Any, kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args``/``kwargs`` given as values (``enqueue_by_name``, ``pgq enqueue``), checked:
    a list or tuple, and a dict with string keys (None means none)."""
    if args is None:
        args = ()
    if not isinstance(args, list | tuple):
        raise ArgumentError(
            f"args must be a list or tuple of positional arguments, got "
            f"{type(args).__name__} {short_repr(args)}"
        )
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(key, str) for key in kwargs):
        raise ArgumentError(
            f"kwargs must be a dict of keyword arguments with string keys, got "
            f"{short_repr(kwargs)}"
        )
    return tuple(args), dict(kwargs)


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

    @cached_property
    def _full_signature(self) -> inspect.Signature:
        return inspect.signature(self.func)

    @property
    def context_parameter(self) -> str | None:
        """Name of the parameter that receives the JobContext, if any."""
        return self._resolved[1]

    def prepare(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], *, leading: int = 0
    ) -> tuple[list[Any], dict[str, Any]]:
        """Bind and validate; return JSON-ready positional and keyword values.

        Arguments keep the form the caller gave them (contract §8): positional ones stay
        positional and keyword ones stay keywords, so ``kwargs->>'user_id'`` finds a job
        enqueued with ``user_id=...``. Binding to the signature only validates. Annotated
        values are validated and converted to their JSON form by pydantic; other values
        are returned as given (``json.dumps`` decides later whether they fit).

        ``leading``: how many positional values the job will receive in front of ``args``
        when it runs (a workflow step receives its predecessors' results there); they
        take the first parameters, and ``args`` are checked against the ones after them.
        """
        signature, _, adapters = self._resolved
        if not leading and not adapters and self._fits_plainly(args, kwargs):
            return list(args), kwargs
        try:
            signature.bind(*((None,) * leading), *args, **kwargs)
        except TypeError as exc:
            raise ArgumentError(f"task {self.task_name!r}: {exc}") from None
        if not adapters:
            return list(args), dict(kwargs)
        positional, var_positional, by_keyword, var_keyword = self._slots
        encoded_args = [
            self._to_json(
                positional[index] if index < len(positional) else var_positional, value, index
            )
            for index, value in enumerate(args, start=leading)
        ]
        encoded_kwargs = {
            name: self._to_json(by_keyword.get(name, var_keyword), value, name)
            for name, value in kwargs.items()
        }
        return encoded_args, encoded_kwargs

    @cached_property
    def _slots(
        self,
    ) -> tuple[list[str], str | None, dict[str, str], str | None]:
        """Which parameter receives each argument: the names of the positional parameters
        in order, the ``*args`` parameter, the parameters a keyword can name, and the
        ``**kwargs`` parameter (the context parameter is none of them)."""
        signature = self._resolved[0]
        positional: list[str] = []
        by_keyword: dict[str, str] = {}
        var_positional = var_keyword = None
        for name, parameter in signature.parameters.items():
            if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                  inspect.Parameter.POSITIONAL_OR_KEYWORD):
                positional.append(name)
            if parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                  inspect.Parameter.KEYWORD_ONLY):
                by_keyword[name] = name
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                var_positional = name
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                var_keyword = name
        return positional, var_positional, by_keyword, var_keyword

    @cached_property
    def _plain_shape(self) -> tuple[int, tuple[str, ...]] | None:
        """(required count, names) when every parameter is a plain positional-or-keyword one.

        Such signatures are checked without ``inspect.Signature.bind`` (the hot path of
        ``enqueue_many``); anything else goes through ``bind`` for its exact error message.
        """
        signature = self._resolved[0]
        names: list[str] = []
        required = 0
        for parameter in signature.parameters.values():
            if parameter.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
                return None
            if parameter.default is inspect.Parameter.empty:
                if required != len(names):
                    return None  # a required parameter after an optional one
                required += 1
            names.append(parameter.name)
        return required, tuple(names)

    def _fits_plainly(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        shape = self._plain_shape
        if shape is None:
            return False
        required, names = shape
        if not kwargs:
            return required <= len(args) <= len(names)
        if args:
            return False
        return set(names[:required]) <= kwargs.keys() and kwargs.keys() <= set(names)

    def encode(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], *, leading: int = 0
    ) -> EncodedArguments:
        """Bind, validate and serialise arguments, or raise ArgumentError in one line
        (``leading``: see :meth:`prepare`)."""
        positional, keywords = self.prepare(args, kwargs, leading=leading)
        try:
            return EncodedArguments(dumps(positional), dumps(keywords))
        except (TypeError, ValueError) as exc:
            raise self._not_json(exc) from None

    def encode_many(
        self, items: list[tuple[tuple[Any, ...], dict[str, Any]]]
    ) -> EncodedBatch:
        """Encode many calls at once: one JSON array of args lists and one of kwargs objects.

        One ``json.dumps`` over the whole batch is several times faster than one per job;
        if it fails, the items are encoded one by one to name the culprit.
        """
        prepared = self._prepare_positional_batch(items)
        if prepared is None:
            prepared = [self.prepare(args, kwargs) for args, kwargs in items]
        try:
            args_text = dumps([positional for positional, _ in prepared])
            if any(keywords for _, keywords in prepared):
                kwargs_text = dumps([keywords for _, keywords in prepared])
            else:
                kwargs_text = "[]"
        except (TypeError, ValueError):
            for position, (positional, keywords) in enumerate(prepared):
                try:
                    dumps(positional)
                    dumps(keywords)
                except (TypeError, ValueError) as exc:
                    raise self._not_json(exc, position) from None
            raise
        return EncodedBatch(args_text, kwargs_text, len(prepared))

    def encode_positional_many(self, items: list[tuple[Any, ...]]) -> EncodedBatch | None:
        """Fast path of :meth:`encode_many` when every call is a tuple of positional arguments.

        The tuples are checked against the signature's shape, validated by one pydantic
        call (annotated tasks) and serialised as they are (a tuple is a JSON array),
        without the per-item lists, dicts and pairs the general path builds: at 100,000
        jobs those allocations and the garbage collections they trigger cost more than
        the encoding. None when the fast path does not apply or anything fails; the
        caller then takes :meth:`encode_many`, which also names a bad item precisely.
        """
        shape = self._plain_shape
        if shape is None or not items:
            return None
        required, names = shape
        lengths = set(map(len, items))
        try:
            if self._resolved[2]:  # annotated: one pydantic call over full-width tuples
                adapter = self._batch_adapter
                if adapter is None or lengths != {len(names)}:
                    return None
                args_text = self._dump_batch(adapter, adapter.validate_python(items))
            else:
                if min(lengths) < required or max(lengths) > len(names):
                    return None
                args_text = dumps(items)
        except (ValidationError, TypeError, ValueError):
            return None
        return EncodedBatch(args_text, "[]", len(items))

    def _dump_batch(self, adapter: TypeAdapter[Any], values: Any) -> str:
        """Validated batch values as JSON text, as strict as :func:`dumps`.

        pydantic writes the whole batch in one call, several times faster than
        ``json.dumps`` of its Python form; but it writes NaN and infinities as ``null``
        and a NUL character as ``\\u0000``, both of which :func:`dumps` refuses, and floats
        from 1e16 on with an exponent, which :func:`dumps` writes positionally. Output
        containing any of these goes the slow way, where :func:`dumps` decides.
        """
        text = adapter.dump_json(values)
        if b"null" in text or b"\\u0000" in text or b"e+" in text:
            if not self._json_native:
                values = adapter.dump_python(values, mode="json")
            return dumps(values)
        return text.decode()

    @cached_property
    def _batch_adapter(self) -> TypeAdapter[Any] | None:
        """One pydantic adapter for a whole batch of full positional calls (or None)."""
        signature, _, adapters = self._resolved
        if not adapters or self._plain_shape is None:
            return None
        hints = typing.get_type_hints(self.func)
        members = tuple(hints.get(name, Any) for name in signature.parameters)
        return TypeAdapter(list[tuple[members]])  # type: ignore[valid-type]

    def _prepare_positional_batch(
        self, items: list[tuple[tuple[Any, ...], dict[str, Any]]]
    ) -> list[tuple[list[Any], dict[str, Any]]] | None:
        """Validate a batch of annotated calls with one pydantic call instead of one per job.

        Only when every item passes all parameters positionally; otherwise None and the
        caller validates item by item (which also gives the precise error).
        """
        adapter = self._batch_adapter
        shape = self._plain_shape
        if adapter is None or shape is None:
            return None
        width = len(shape[1])
        if any(kwargs or len(args) != width for args, kwargs in items):
            return None
        try:
            values = adapter.validate_python([args for args, _ in items])
            if not self._json_native:
                values = adapter.dump_python(values, mode="json")
        except ValidationError:
            return None  # item-by-item validation reports the first bad item precisely
        return [(list(positional), {}) for positional in values]

    @cached_property
    def _json_native(self) -> bool:
        """True when every annotation validates to a value that already is JSON
        (int, float, str, bool, None): then pydantic's JSON dump step can be skipped."""
        hints = typing.get_type_hints(self.func)
        native = (int, float, str, bool, type(None))
        return all(hints.get(name, Any) in native for name in self._resolved[0].parameters
                   if name in self._resolved[2])

    def _not_json(self, exc: Exception, position: int | None = None) -> ArgumentError:
        where = "" if position is None else f" (item {position})"
        return ArgumentError(
            f"task {self.task_name!r}{where}: arguments must be JSON-serialisable ({exc}); "
            "pass JSON types or annotate the parameter with a type pydantic can serialise"
        )

    def _to_json(self, parameter: str | None, value: Any, given_as: int | str) -> Any:
        """One argument in its JSON form, validated by its parameter's annotation (if any).

        ``parameter`` is the parameter that receives the argument (``*args``/``**kwargs``
        for extra ones); ``given_as`` its position or keyword, for the error message.
        Binding already refused arguments that no parameter receives.
        """
        adapter = self._resolved[2].get(parameter) if parameter is not None else None
        if adapter is None:
            return value
        try:
            return self._one(adapter, value)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = [str(part) for part in first.get("loc", ())]
            if parameter != given_as and not isinstance(given_as, int):
                loc.insert(0, given_as)  # a **kwargs entry: name the keyword
            where = ".".join(loc) or str(parameter)
            raise ArgumentError(
                f"task {self.task_name!r}: invalid argument {parameter!r} "
                f"({where}: {first.get('msg', 'invalid value')})"
            ) from None

    @staticmethod
    def _one(adapter: TypeAdapter[Any], value: Any) -> Any:
        return adapter.dump_python(adapter.validate_python(value), mode="json")

    def decode(
        self, args: list[Any], kwargs: dict[str, Any], context: Any = None
    ) -> tuple[list[Any], dict[str, Any]]:
        """Rebuild annotated arguments from their stored JSON form (in the worker).

        With ``context``, the result also passes it to the JobContext parameter, wherever
        that parameter sits (``def f(ctx: JobContext, x)`` as well as ``def f(x, ctx)``).

        Stored arguments that do not fit (a row inserted with plain SQL, a signature
        changed since the job was enqueued) raise :class:`ArgumentError` in one line that
        names the parameter, the stored value and what is wrong with it: the worker
        prefixes it with the task's name and that line becomes the dead job's summary.
        """
        signature, context_name, adapters = self._resolved
        with_context = context is not None and context_name is not None
        if not adapters and not with_context:
            return args, kwargs
        shape = self._plain_shape
        if not with_context and not kwargs and shape is not None and self._json_native \
                and shape[0] <= len(args) <= len(shape[1]):
            # The common case (positional, JSON-native annotations): validate by position,
            # without binding — this runs once per job in the worker.
            return [
                self._rebuild(name, adapters[name], value) if name in adapters else value
                for name, value in zip(shape[1], args, strict=False)
            ], {}
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentError(
                f"the stored arguments (args {short_repr(args)}, kwargs {short_repr(kwargs)}) "
                f"do not fit the task's signature: {exc}"
            ) from None
        for name, value in bound.arguments.items():
            adapter = adapters.get(name)
            if adapter is None:
                continue
            kind = signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                bound.arguments[name] = tuple(self._rebuild(name, adapter, v) for v in value)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                bound.arguments[name] = {
                    k: self._rebuild(name, adapter, v) for k, v in value.items()
                }
            else:
                bound.arguments[name] = self._rebuild(name, adapter, value)
        if context is not None and context_name is not None:
            # Re-bind on the full signature so the arguments after the context parameter
            # are passed where they belong rather than shifted into its place.
            arguments = dict(bound.arguments)
            arguments[context_name] = context
            bound = inspect.BoundArguments(self._full_signature, arguments)
        return list(bound.args), dict(bound.kwargs)

    def _rebuild(self, name: str, adapter: TypeAdapter[Any], value: Any) -> Any:
        """``value`` validated into parameter ``name``'s annotated type, or ArgumentError.

        pydantic's own message runs to several lines and ends with a documentation URL;
        the dead job's summary line must say what was wrong instead.
        """
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(part) for part in first.get("loc", ()))
            detail = f"{loc}: " if loc else ""
            raise ArgumentError(
                f"parameter {name!r} ({_type_name(self._hints.get(name))}) cannot take the "
                f"stored value {short_repr(value)}: {detail}{first.get('msg', 'invalid value')}"
            ) from None

    @cached_property
    def _hints(self) -> dict[str, Any]:
        return typing.get_type_hints(self.func)


def _type_name(annotation: Any) -> str:
    """``int``, ``User``, ``list[int]``: how an annotation reads in an error message."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return str(annotation).replace("typing.", "")
