"""What every write to the world state shares: its text checks, an item's id and common event fields, and
the append to the item's stream.

Items are recorded in their own stream (``fact-<id>``, ``decision-<id>``, …). With an idempotency key the
item's id is derived from the key (and the project, kind and scope), so a retried request lands in the same
stream and the event store returns the original append instead of writing a second item.

Token counts (W4) are computed here, once per encoding in ``settings.NEXUM_ITEM_ENCODINGS`` (default
``cl100k_base``), from the item's rendered text, and carried in the event.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from context_app.world.models import Tool, ToolScope, WorldItem
from context_app.world.services.scopes import Scope
from nexum.adapters.tokenization import CachedCounter, counter_for
from nexum.core.errors import ConcurrencyError, ValidationFailed
from nexum.core.events import DomainEvent
from nexum.core.ids import WORLD_IDS
from nexum.core.text import require_storable
from nexum.core.world.items import (
    RECORDABLE_TRUST_CLASSES,
    SHORT_MAX,
    TEXT_MAX,
    item_stream,
    item_terms,
    token_counts,
)
from nexum.eventstore import store


def item_encodings() -> list[str]:
    return sorted(set(settings.NEXUM_ITEM_ENCODINGS))


def item_counters(encodings: Iterable[str] | None = None) -> list[CachedCounter]:
    return [counter_for(name) for name in (item_encodings() if encodings is None else encodings)]


def item_fields(
    scope: Scope, item_id: str, text: str, trust_class: str, rendered: str, *term_parts: str
) -> dict[str, Any]:
    if trust_class not in RECORDABLE_TRUST_CLASSES:
        raise ValidationFailed(
            f"trust_class must be one of {', '.join(RECORDABLE_TRUST_CLASSES)}; signed classes need a"
            " signature and are not recorded through this interface",
            field="trust_class",
        )
    return {
        "item_id": item_id,
        "goal_id": scope.goal_id,
        "task_id": scope.task_id,
        "text": text,
        "trust_class": trust_class,
        "token_counts": token_counts(rendered, item_counters()),
        "terms": list(item_terms(*term_parts)),
    }


def append_item(
    scope: Scope, kind: str, event: DomainEvent, *, actor: str, idempotency_key: str | None
) -> WorldItem:
    item_id = event.item_id  # type: ignore[attr-defined]
    append_events(item_stream(kind, item_id), [event], 0, scope.project_id, actor, idempotency_key)
    return WorldItem.objects.get(id=item_id)


def append_events(
    stream_id: str,
    events: list[DomainEvent],
    expected_version: int | None,
    project_id: str,
    actor: str,
    idempotency_key: str | None,
) -> store.AppendResult:
    return store.append(
        stream_id=stream_id,
        events=events,
        expected_version=expected_version,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=project_id,
    )


def new_item_id(scope: Scope, kind: str, idempotency_key: str | None) -> str:
    if idempotency_key is None:
        return str(uuid.uuid4())
    return str(uuid.uuid5(WORLD_IDS, f"{scope.project_id}/{kind}/{scope.scope_id}/{idempotency_key}"))


def validated_version(item: WorldItem | Tool | ToolScope | None, expected_version: int | None) -> int:
    current = item.version if item is not None else 0
    if expected_version is not None and expected_version != current:
        raise ConcurrencyError(
            f"the version is {current}, not the expected {expected_version}",
            field="expected_version",
            details={"current_version": current, "expected_version": expected_version},
        )
    return current


def validated_text(value: Any, field: str, *, required: bool = True, limit: int = TEXT_MAX) -> str:
    if not isinstance(value, str):
        raise ValidationFailed(f"{field} must be a string", field=field)
    validate_storable(value, field)
    value = value.strip()
    if required and not value:
        raise ValidationFailed(f"{field} must not be empty", field=field)
    if len(value) > limit:
        raise ValidationFailed(f"{field} is over {limit} characters", field=field)
    return value


def validate_storable(text: str, field: str) -> None:
    """Text every database keeps (``nexum.core.text``); a schema may not spell NUL as ``\\u0000`` either."""
    if field == "schema" and "\\u0000" in text:
        raise ValidationFailed(f"{field} must not contain NUL characters", field=field)
    require_storable(text, field)


def validated_short(value: Any, field: str) -> str:
    return validated_text(value, field, required=False, limit=SHORT_MAX)
