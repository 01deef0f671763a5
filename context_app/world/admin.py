"""The world state in the admin (SPEC I4), read-only: it mirrors the log."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from context_app.world.models import Tool, ToolScope, WorldItem
from nexum.eventstore.admin import ReadOnlyAdmin
from tasks_app.models import Task


class _ScopeFilter(admin.SimpleListFilter):
    """Items of one goal or task (of those with items), labelled by task key or goal objective."""

    column: str

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        ids = list(
            WorldItem.objects.exclude(**{self.column: None})
            .order_by(self.column)
            .values_list(self.column, flat=True)
            .distinct()[:100]
        )
        labels = {
            task.id: (task.objective[:50] if task.is_goal else task.key or task.objective[:50])
            for task in Task.objects.filter(id__in=ids).only("id", "key", "objective", "is_goal")
        }
        return [(str(value), labels.get(value, str(value))) for value in ids]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorldItem]) -> QuerySet[WorldItem]:
        value = self.value()
        if not value:
            return queryset
        try:
            return queryset.filter(**{self.column: uuid.UUID(value)})
        except ValueError:
            return queryset.none()


class TaskFilter(_ScopeFilter):
    title = "task"
    parameter_name = "task"
    column = "task_id"


class GoalFilter(_ScopeFilter):
    title = "goal"
    parameter_name = "goal"
    column = "goal_id"


@admin.register(WorldItem)
class WorldItemAdmin(ReadOnlyAdmin):
    list_display = (
        "kind",
        "short_text",
        "trust_class",
        "source",
        "status",
        "verified",
        "tokens",
        "task_id",
        "recorded_at",
    )
    list_filter = ("kind", "trust_class", "status", "verified", TaskFilter, GoalFilter, "project")
    search_fields = ("text", "source", "subject", "=id")
    ordering = ("-position",)
    show_full_result_count = False

    @admin.display(description="text")
    def short_text(self, item: WorldItem) -> str:
        return item.text if len(item.text) <= 80 else item.text[:79] + "…"

    @admin.display(description="tokens")
    def tokens(self, item: WorldItem) -> str:
        return ", ".join(f"{encoding}: {count}" for encoding, count in sorted(item.token_counts.items()))


@admin.register(Tool)
class ToolAdmin(ReadOnlyAdmin):
    list_display = ("name", "project", "pinned", "score", "version", "updated_at")
    list_filter = ("project", "pinned")
    search_fields = ("name", "description")


@admin.register(ToolScope)
class ToolScopeAdmin(ReadOnlyAdmin):
    list_display = ("id", "goal_id", "task_id", "allowed", "pinned", "version", "updated_at")
    list_filter = ("project",)
