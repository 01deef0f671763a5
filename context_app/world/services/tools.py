"""The tool registry: a project's tools, defined and removed, and the tools a goal or task may use
(``ToolScope``)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any

from context_app.world import selectors
from context_app.world.models import Tool, ToolScope
from context_app.world.services.recording import (
    append_events,
    item_counters,
    validate_storable,
    validated_text,
    validated_version,
)
from context_app.world.services.scopes import Scope
from nexum.core.digests import canonical_json
from nexum.core.errors import Conflict, NotFound, ValidationFailed
from nexum.core.ids import WORLD_IDS
from nexum.core.world.items import (
    ToolDefined,
    ToolRemoved,
    ToolScopeSet,
    item_terms,
    render_tool,
    token_counts,
    tool_scope_stream,
    tool_stream,
    validate_tool_name,
)
from nexum.eventstore import reading, store

SCHEMA_MAX_CHARS = 100_000


def tool_define(
    *,
    project_id: str,
    name: str,
    description: str = "",
    schema: Mapping[str, Any] | None = None,
    pinned: bool = False,
    score: float | None = None,
    create_only: bool = False,
    expected_version: int | None = None,
    actor: str,
    idempotency_key: str | None = None,
) -> Tool:
    """Register a tool or replace its definition. ``create_only`` refuses a name already registered (409)."""
    validate_tool_name(name)
    description = validated_text(description, "description", required=False)
    schema = dict(schema or {})
    try:
        schema_text = canonical_json(schema)
    except (TypeError, ValueError) as error:
        raise ValidationFailed(f"schema must be JSON: {error}", field="schema") from None
    validate_storable(schema_text, "schema")
    if len(schema_text) > SCHEMA_MAX_CHARS:
        raise ValidationFailed(f"schema is over {SCHEMA_MAX_CHARS} characters of JSON", field="schema")
    if not isinstance(pinned, bool):
        raise ValidationFailed("pinned must be true or false", field="pinned")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise ValidationFailed("score must be a finite number", field="score")
        score = float(score)
    stream = tool_stream(project_id, name)
    if store.replayed(stream, idempotency_key):
        return selectors.tool_get(project_id=project_id, name=name)
    existing = Tool.objects.filter(project_id=project_id, name=name).first()
    if create_only and existing is not None:
        raise Conflict(f"a tool named {name!r} is already registered", field="name", code="tool_exists")
    version = validated_version(existing, expected_version)
    if version == 0:
        version = reading.stream_version(stream)  # a removed tool's stream continues
    rendered = render_tool(name=name, description=description, schema=schema)
    event = ToolDefined(
        tool_id=_tool_id(project_id, name),
        name=name,
        description=description,
        schema=schema,
        pinned=pinned,
        score=score,
        token_counts=token_counts(rendered, item_counters()),
        terms=list(item_terms(name.replace("_", " "), description)),
    )
    append_events(stream, [event], version, project_id, actor, idempotency_key)
    return selectors.tool_get(project_id=project_id, name=name)


def tool_remove(*, project_id: str, name: str, expected_version: int | None = None, actor: str) -> None:
    tool = selectors.tool_get(project_id=project_id, name=name)
    version = validated_version(tool, expected_version)
    append_events(
        tool_stream(project_id, name),
        [ToolRemoved(tool_id=str(tool.id), name=name)],
        version,
        project_id,
        actor,
        None,
    )


def tool_scope_set(
    *,
    scope: Scope,
    allowed: list[str] | None,
    pinned: list[str],
    expected_version: int | None = None,
    actor: str,
    idempotency_key: str | None = None,
) -> ToolScope:
    """Narrow a goal's or task's tools to ``allowed`` (``None``: all) and pin some of them."""
    registered = set(Tool.objects.filter(project_id=scope.project_id).values_list("name", flat=True))
    for field_name, names in (("allowed", allowed or []), ("pinned", pinned)):
        for index, name in enumerate(names):
            validate_tool_name(name, field_name=f"{field_name}.{index}")
            if name not in registered:
                raise NotFound(f"no tool named {name!r} is registered", field=f"{field_name}.{index}")
    if allowed is not None:
        outside = [name for name in pinned if name not in set(allowed)]
        if outside:
            raise ValidationFailed(f"pinned tool {outside[0]!r} is not in allowed", field="pinned")
    stream = tool_scope_stream(scope.scope_id)
    existing = ToolScope.objects.filter(id=scope.scope_id).first()
    if not store.replayed(stream, idempotency_key):
        version = validated_version(existing, expected_version)
        event = ToolScopeSet(
            scope_id=scope.scope_id,
            goal_id=scope.goal_id,
            task_id=scope.task_id,
            allowed=sorted(set(allowed)) if allowed is not None else None,
            pinned=sorted(set(pinned)),
        )
        append_events(stream, [event], version, scope.project_id, actor, idempotency_key)
    return ToolScope.objects.get(id=scope.scope_id)


def _tool_id(project_id: str, name: str) -> str:
    return str(uuid.uuid5(WORLD_IDS, f"{project_id}/tool/{name}"))
