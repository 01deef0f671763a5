"""The check kinds by name, and a check's plain-dict form (event data, a contract in a request).

A kind registers itself with ``@check_kind("<kind>")`` in its own module of this package; ``check_kinds()``
imports every module of the package once, so a new module is a new kind with nothing else to edit.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, TypeVar

from nexum.core.errors import ValidationFailed
from nexum.core.verification import checks
from nexum.core.verification.checks.base import CheckSpec

_KINDS: dict[str, type[CheckSpec]] = {}
_NOT_KINDS = frozenset({"base", "registry"})

Kind = TypeVar("Kind", bound=type[CheckSpec])


def check_kind(kind: str) -> Callable[[Kind], Kind]:
    """Register the decorated ``CheckSpec`` subclass as the check kind ``kind`` (its ``kind``)."""

    def register(cls: Kind) -> Kind:
        if kind in _KINDS and _KINDS[kind] is not cls:
            raise ValueError(f"check kind {kind!r} is registered twice")
        cls.kind = kind
        _KINDS[kind] = cls
        return cls

    return register


@cache
def check_kinds() -> Mapping[str, type[CheckSpec]]:
    """Every check kind by name, sorted: each module of this package imported once."""
    for module in pkgutil.iter_modules(checks.__path__):
        if module.name not in _NOT_KINDS:
            importlib.import_module(f"{checks.__name__}.{module.name}")
    return dict(sorted(_KINDS.items()))


def check_to_dict(check: CheckSpec) -> dict[str, Any]:
    """A JSON-able dict with a ``kind`` member; ``check_from_dict`` reverses it."""
    data: dict[str, Any] = {"kind": check.kind}
    required, optional = check.members()
    for name in (*required, *optional):
        value = getattr(check, name)
        data[name] = list(value) if isinstance(value, tuple) else value
    return data


def check_from_dict(data: object) -> CheckSpec:
    """Build a check spec from a plain dict, refusing unknown kinds, missing and unexpected members."""
    if not isinstance(data, Mapping):
        raise ValidationFailed(f"a check must be an object, not {type(data).__name__}", field="check")
    kinds = check_kinds()
    kind = data.get("kind")
    if kind not in kinds:
        raise ValidationFailed(f"kind must be one of {', '.join(kinds)}, got {kind!r}", field="kind")
    cls = kinds[kind]
    required, optional = cls.members()
    for name in required:
        if name not in data:
            raise ValidationFailed(f"a {kind} check needs {name!r}", field=name)
    unexpected = sorted(str(key) for key in data if key not in {"kind", *required, *optional})
    if unexpected:
        raise ValidationFailed(
            f"unexpected member(s) for a {kind} check: {', '.join(unexpected)}", field=unexpected[0]
        )
    return cls(**{name: data[name] for name in (*required, *optional) if name in data})
