"""Typed domain events: one frozen dataclass per event type, a stable stored name, a schema version.

``@event_type("TaskStarted", version=1)`` registers a class under its stored name. ``event_from_data``
validates stored or incoming data against the class's fields (an unknown type or malformed data raises
``InvalidEvent``), after running the upcasters that lift older schema versions to the current one.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, Union

from nexum.core.errors import ValidationFailed


class InvalidEvent(ValidationFailed):
    code = "invalid_event"


class UnknownEventType(ValidationFailed):
    code = "unknown_event_type"


@dataclasses.dataclass(frozen=True)
class DomainEvent:
    """Base of every domain event. Subclasses are frozen dataclasses registered with ``@event_type``."""

    event_type: ClassVar[str] = ""
    schema_version: ClassVar[int] = 1


E = TypeVar("E", bound=type[DomainEvent])
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

_registry: dict[str, type[DomainEvent]] = {}
_upcasters: dict[tuple[str, int], Upcaster] = {}


def event_type(name: str, version: int = 1) -> Callable[[E], E]:
    """Register an event class under a stable stored ``name`` at schema ``version``."""

    def register(cls: E) -> E:
        if name in _registry and _registry[name] is not cls:
            raise RuntimeError(f"event type {name!r} is registered twice")
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} must be a dataclass")
        cls.event_type = name
        cls.schema_version = version
        _registry[name] = cls
        return cls

    return register


def upcaster(name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register a function lifting ``name``'s data from ``from_version`` to ``from_version + 1``."""

    def register(function: Upcaster) -> Upcaster:
        _upcasters[(name, from_version)] = function
        return function

    return register


def event_class(name: str) -> type[DomainEvent]:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownEventType(f"unknown event type {name!r}", field="type") from None


def registered_event_types() -> dict[str, type[DomainEvent]]:
    return dict(sorted(_registry.items()))


def upcast(name: str, schema_version: int, data: Mapping[str, Any]) -> dict[str, Any]:
    """Lift stored ``data`` of ``name`` from ``schema_version`` to the registered class's version."""
    cls = event_class(name)
    if schema_version > cls.schema_version:
        raise InvalidEvent(
            f"{name} schema version {schema_version} is newer than this code knows ({cls.schema_version})"
        )
    lifted = dict(data)
    for version in range(schema_version, cls.schema_version):
        step = _upcasters.get((name, version))
        if step is None:
            raise InvalidEvent(f"no upcaster for {name} from schema version {version} to {version + 1}")
        lifted = step(lifted)
    return lifted


def event_from_data(name: str, data: Any, schema_version: int | None = None) -> DomainEvent:
    """Build and validate a typed event from JSON data (upcasting from ``schema_version`` if older)."""
    cls = event_class(name)
    if not isinstance(data, Mapping):
        raise InvalidEvent(f"{name}: data must be a JSON object", field="data")
    if schema_version is not None:
        data = upcast(name, schema_version, data)
    return _build(cls, data, prefix=name)


def event_to_data(event: DomainEvent) -> dict[str, Any]:
    """The event's fields as JSON-ready data (tuples become lists)."""
    return {field.name: _to_json(getattr(event, field.name)) for field in dataclasses.fields(event)}


def validate_event(event: DomainEvent) -> DomainEvent:
    """Re-validate an event built in code (catches wrong types passed to the constructor)."""
    if not isinstance(event, DomainEvent) or type(event).event_type not in _registry:
        raise UnknownEventType(f"{type(event).__name__} is not a registered event type", field="type")
    return _build(type(event), event_to_data(event), prefix=type(event).event_type)


_SCALARS = (str, int, float, type(None))


def _to_json(value: Any) -> Any:
    if isinstance(value, _SCALARS):  # most values: checked first, cheaply (``Mapping`` is an ABC)
        return value
    if isinstance(value, tuple | list):
        return [item if isinstance(item, _SCALARS) else _to_json(item) for item in value]
    if isinstance(value, Mapping):
        return {
            str(key): item if isinstance(item, _SCALARS) else _to_json(item) for key, item in value.items()
        }
    return value


@functools.cache
def _schema(cls: type[DomainEvent]) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """The resolved type hints and fields of an event class, computed once per class."""
    return typing.get_type_hints(cls), {field.name: field for field in dataclasses.fields(cls)}


def _build(cls: type[DomainEvent], data: Mapping[str, Any], prefix: str) -> DomainEvent:
    hints, fields = _schema(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise InvalidEvent(f"{prefix}: unknown field {unknown[0]!r}", field=unknown[0])
    values: dict[str, Any] = {}
    for name, field in fields.items():
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise InvalidEvent(f"{prefix}: missing field {name!r}", field=name)
            continue
        values[name] = _coerce(data[name], hints[name], f"{prefix}.{name}", name)
    return cls(**values)


def _coerce(value: Any, hint: Any, where: str, field: str) -> Any:
    """Check ``value`` against a JSON-compatible type hint; tuples are accepted as lists."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        for option in args:
            try:
                return _coerce(value, option, where, field)
            except InvalidEvent:
                continue
        raise InvalidEvent(f"{where}: {value!r} does not match {hint}", field=field)
    if hint is type(None):
        if value is None:
            return None
        raise InvalidEvent(f"{where}: expected null", field=field)
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise InvalidEvent(f"{where}: expected a list", field=field)
        item_hint = args[0] if args else Any
        items = [_coerce(item, item_hint, where, field) for item in value]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
            raise InvalidEvent(f"{where}: expected an object", field=field)
        return dict(value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise InvalidEvent(f"{where}: expected true or false", field=field)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise InvalidEvent(f"{where}: expected an integer", field=field)
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise InvalidEvent(f"{where}: expected a number", field=field)
    if hint is str:
        if isinstance(value, str):
            return value
        raise InvalidEvent(f"{where}: expected a string", field=field)
    raise TypeError(f"{where}: unsupported field type {hint!r} in an event definition")
