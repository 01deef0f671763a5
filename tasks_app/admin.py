from django.contrib import admin

from nexum.eventstore.admin import ReadOnlyAdmin, ReadOnlyInline
from tasks_app.models import AgentToken, Goal, Project, Task, TaskTransition


@admin.register(Project)
class ProjectAdmin(ReadOnlyAdmin):
    list_display = ("slug", "name", "created_at", "version")
    search_fields = ("slug", "name")


@admin.register(AgentToken)
class AgentTokenAdmin(ReadOnlyAdmin):
    list_display = ("name", "role", "project", "key_prefix", "issued_at", "revoked_at")
    list_filter = ("role", "project")
    exclude = ("key_sha256",)


class TimelineInline(ReadOnlyInline):
    """Who moved the task, when, from which state to which, and why. Read-only: it mirrors the log."""

    model = TaskTransition
    fk_name = "task"
    fields = (
        "recorded_at",
        "actor",
        "from_state",
        "to_state",
        "attempt",
        "reason",
        "decision_id",
        "position",
    )
    readonly_fields = fields
    ordering = ("position",)
    verbose_name = "transition"
    verbose_name_plural = "timeline"


class GoalTimelineInline(TimelineInline):
    """Every transition of every task of the goal."""

    fk_name = "goal"
    fields = ("recorded_at", "task", "actor", "from_state", "to_state", "attempt", "reason", "decision_id")
    readonly_fields = fields


class PlanInline(ReadOnlyInline):
    model = Task
    fk_name = "goal"
    fields = ("key", "objective", "state", "attempt", "risk", "depends_on", "version")
    readonly_fields = fields
    ordering = ("ordinal",)
    show_change_link = True
    verbose_name = "task"
    verbose_name_plural = "plan"

    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        return super().get_queryset(request).filter(is_goal=False)


@admin.register(Goal)
class GoalAdmin(ReadOnlyAdmin):
    """Goals, their derived state, their plan and the timeline of all their tasks."""

    list_display = ("objective", "project", "state", "progress", "risk", "created_at", "updated_at")
    list_filter = ("state", "project")
    search_fields = ("objective",)
    exclude = ("depends_on", "attempt", "parent", "key", "ordinal")
    inlines = (PlanInline, GoalTimelineInline)

    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        return super().get_queryset(request).filter(is_goal=True)


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    """Tasks with their lifecycle timeline. Nothing here can change a state; ``completed`` comes only from the
    verification gate."""

    list_display = ("key", "objective", "goal", "state", "attempt", "risk", "version", "updated_at")
    list_filter = ("state", "risk", "project")
    search_fields = ("key", "objective")
    exclude = ("progress",)
    inlines = (TimelineInline,)

    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        return super().get_queryset(request).filter(is_goal=False)
