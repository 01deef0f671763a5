"""Reads of the world state: items by scope, facts with their history, tools as a task sees them.

``context_items`` turns stored items into the compiler's ``ContextItem`` (metadata plus the rendered text),
using the token counts stored when the items were recorded (W4).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import Q, QuerySet

from context_app.world.models import Tool, ToolScope, WorldItem
from nexum.adapters.tokenization import counter_for
from nexum.core.compilation.model import ContextItem, ToolSpec
from nexum.core.errors import NotFound
from nexum.core.ids import uuid_or_none
from nexum.core.world.items import FACT_CURRENT, effective_tools, item_stream
from nexum.eventstore import reading
from nexum.eventstore.reading import StoredEvent


def item_get(*, project_id: str, item_id: Any, kind: str | None = None) -> WorldItem:
    label = kind or "item"
    item = None
    parsed = uuid_or_none(item_id)
    if parsed is not None:
        items = WorldItem.objects.filter(project_id=project_id, id=parsed)
        if kind is not None:
            items = items.filter(kind=kind)
        item = items.first()
    if item is None:
        raise NotFound(f"no {label.replace('_', ' ')} {item_id}", field=f"{label}_id")
    return item


def fact_get(*, project_id: str, fact_id: Any) -> WorldItem:
    return item_get(project_id=project_id, item_id=fact_id, kind="fact")


def fact_history(*, fact: WorldItem) -> list[StoredEvent]:
    """Every event of the fact's stream, oldest first (recorded, verified, superseded, retracted)."""
    return reading.read_stream(item_stream("fact", str(fact.id)))


def item_list(
    *,
    project_id: str,
    goal_id: str | None = None,
    task_id: str | None = None,
    task_goal_id: str | None = None,
    own_only: bool = False,
    kinds: Sequence[str] | None = None,
    current_only: bool = False,
    after: int = 0,
) -> QuerySet[WorldItem]:
    """Items of the project in log order (oldest first), after log position ``after``.

    ``task_id`` selects what the task sees (its own items and its goal's shared ones, given
    ``task_goal_id``), or with ``own_only`` only its own. ``current_only`` drops superseded and retracted
    facts.
    """
    items = WorldItem.objects.filter(project_id=project_id, position__gt=after)
    if goal_id is not None:
        items = items.filter(goal_id=goal_id)
    if task_id is not None:
        if own_only or task_goal_id is None:
            items = items.filter(task_id=task_id)
        else:
            items = items.filter(Q(task_id=task_id) | Q(goal_id=task_goal_id, task_id__isnull=True))
    if kinds:
        items = items.filter(kind__in=list(kinds))
    if current_only:
        items = items.filter(status=FACT_CURRENT)
    return items.order_by("position")


def items_for_task(
    *, project_id: str, goal_id: str, task_id: str | None, kinds: Sequence[str] | None = None
) -> QuerySet[WorldItem]:
    """The current world state a task sees (W2): its goal's shared items and its own, facts current only.

    ``task_id`` None: the goal's shared items only.
    """
    shared = Q(task_id__isnull=True)
    items = WorldItem.objects.filter(
        shared | Q(task_id=task_id) if task_id else shared,
        project_id=project_id,
        goal_id=goal_id,
        status=FACT_CURRENT,
    )
    if kinds:
        items = items.filter(kind__in=list(kinds))
    return items.order_by("position")


def context_items(items: Iterable[WorldItem], *, encoding: str) -> list[ContextItem]:
    """The compiler's view of ``items``: stored token counts in ``encoding`` and the rendered text inline.

    An item without a stored count in ``encoding`` is counted here (in memory); run
    ``services.token_counts.item_token_counts_ensure`` to store such counts once.
    """
    result = []
    for item in items:
        tokens = item.token_counts.get(encoding)
        if tokens is None:
            tokens = counter_for(encoding).count(item.rendered)
        result.append(
            ContextItem(
                kind=item.kind,
                id=str(item.id),
                token_count=tokens,
                line_count=item.line_count,
                position=item.position,
                verified=item.verified,
                terms=tuple(item.terms),
                trust_class=item.trust_class,
                origin=item.source or None,
                text=item.rendered,
            )
        )
    return result


# --- tools ------------------------------------------------------------------------------------------------


def tool_list(*, project_id: str) -> QuerySet[Tool]:
    return Tool.objects.filter(project_id=project_id).order_by("name")


def tool_get(*, project_id: str, name: str) -> Tool:
    tool = Tool.objects.filter(project_id=project_id, name=name).first()
    if tool is None:
        raise NotFound(f"no tool named {name!r}", field="name")
    return tool


def tool_scope_get(*, scope_id: str) -> ToolScope | None:
    return ToolScope.objects.filter(id=scope_id).first()


def tools_for_scope(*, project_id: str, goal_id: str, task_id: str | None) -> list[Tool]:
    """The registry narrowed by the goal's scope, then the task's; ``pinned`` set as the task sees it."""
    registry = {tool.name: tool for tool in tool_list(project_id=project_id)}
    scope_ids = [goal_id] + ([task_id] if task_id else [])
    scopes = {
        str(scope.id): scope for scope in ToolScope.objects.filter(project_id=project_id, id__in=scope_ids)
    }
    narrowing = [
        (scopes[scope_id].allowed, list(scopes[scope_id].pinned))
        for scope_id in scope_ids
        if scope_id in scopes
    ]
    visible = effective_tools(((name, tool.pinned) for name, tool in registry.items()), narrowing)
    tools = []
    for name, pinned in visible:
        tool = registry[name]
        tool.pinned = pinned
        tools.append(tool)
    return tools


def tool_specs(tools: Iterable[Tool]) -> list[ToolSpec]:
    return [
        ToolSpec(
            name=tool.name,
            description=tool.description,
            schema=tool.schema,
            pinned=tool.pinned,
            score=tool.score,
        )
        for tool in tools
    ]
