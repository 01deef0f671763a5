"""The source kinds by name, and building a source from its stored configuration.

A kind registers itself with ``@source_kind("<kind>")``, in its own module of this package (``source_kinds``
imports every module of the package once, so a new module is a new kind with nothing else to edit) or, for a
library user's kind, wherever its class is defined, imported before it is used.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from nexum.adapters import sources
from nexum.adapters.source_policy import SourcePolicy
from nexum.adapters.sources.base import Clock, SourcePlugin, utc_now
from nexum.core.errors import ValidationFailed

_KINDS: dict[str, type[SourcePlugin]] = {}
_NOT_KINDS = frozenset({"base", "registry"})
_KIND_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_discovered = False

Kind = TypeVar("Kind", bound=type[SourcePlugin])


def source_kind(kind: str) -> Callable[[Kind], Kind]:
    """Register the decorated ``SourcePlugin`` subclass as the source kind ``kind`` (its ``kind``).
    Registering the same class again is harmless; another class under a taken kind is refused."""
    if not isinstance(kind, str) or not _KIND_NAME.fullmatch(kind):
        raise ValidationFailed(f"invalid source kind {kind!r}", field="kind")

    def register(cls: Kind) -> Kind:
        if not (isinstance(cls, type) and issubclass(cls, SourcePlugin)):
            raise ValidationFailed("a source kind must be a SourcePlugin subclass", field="kind")
        existing = _KINDS.get(kind)
        if existing is not None and existing is not cls:
            raise ValidationFailed(f"source kind {kind!r} is already registered", field="kind")
        cls.kind = kind
        _KINDS[kind] = cls
        return cls

    return register


def source_kinds() -> Mapping[str, type[SourcePlugin]]:
    """Every source kind by name, sorted: this package's modules imported once, then whatever else
    registered itself."""
    global _discovered
    if not _discovered:
        for module in pkgutil.iter_modules(sources.__path__):
            if module.name not in _NOT_KINDS:
                importlib.import_module(f"{sources.__name__}.{module.name}")
        _discovered = True
    return dict(sorted(_KINDS.items()))


def compiled_kind(source_kind_name: str) -> str:
    """The compiler section a source kind's items go to (``SourcePlugin.compiles_as``); ``fact`` for a kind
    that is no longer registered."""
    cls = source_kinds().get(source_kind_name)
    return "fact" if cls is None else cls.compiles_as


def build_source(
    kind: str, name: str, config: Mapping[str, Any], *, policy: SourcePolicy, clock: Clock = utc_now
) -> SourcePlugin:
    """The source of ``kind`` named ``name`` from its stored configuration, confined by ``policy``."""
    kinds = source_kinds()
    cls = kinds.get(kind)
    if cls is None:
        raise ValidationFailed(f"unknown source kind {kind!r}; known: {', '.join(kinds)}", field="kind")
    if not isinstance(config, Mapping):
        raise ValidationFailed("source config must be an object", field="config")
    return cls.from_config(name, config, policy=policy, clock=clock)
