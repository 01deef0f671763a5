"""Admin of the task graph and of API tokens. Tasks and goals mirror the log and are read-only. Tokens are
issued and revoked here through ``tasks_app.services.tokens`` (each an event, acting as ``admin:<user>``); an
issued key is shown once, on the response page, and is never stored, put in a message or shown again.
Projects are created in ``context_app.catalog.admin`` (a new project gets the default model catalog)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.cache import add_never_cache_headers, patch_cache_control
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from nexum.core.tasks.projects import validate_token_name
from nexum.eventstore.admin import ReadOnlyAdmin, ReadOnlyInline, admin_actor, validated_by
from tasks_app import selectors
from tasks_app.models import AgentToken, Goal, Task, TaskTransition
from tasks_app.services.tokens import agent_token_issue, agent_token_revoke


class TokenIssueForm(forms.ModelForm):
    """Who holds the token and its role; the name is checked by the rule the service applies, and a name
    taken in the project is refused by the model's unique constraint, before anything is written."""

    class Meta:
        model = AgentToken
        fields = ("project", "name", "role")

    def clean_name(self) -> str:
        return validated_by(validate_token_name, self.cleaned_data["name"])


@admin.register(AgentToken)
class AgentTokenAdmin(ReadOnlyAdmin):
    """Tokens by project and role with their key prefix; "Add" issues one, the "Revoke" action revokes."""

    form = TokenIssueForm
    list_display = ("name", "role", "project", "key_prefix", "issued_at", "revoked_at")
    list_filter = ("role", "project")
    exclude = ("key_sha256",)
    actions = ("revoke_tokens",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return admin.ModelAdmin.has_add_permission(self, request)

    def get_fields(self, request: HttpRequest, obj: AgentToken | None = None) -> tuple[str, ...]:
        issue = ("project", "name", "role")
        return issue if obj is None else (*issue, "key_prefix", "issued_at", "revoked_at")

    def save_model(self, request: HttpRequest, obj: AgentToken, form: Any, change: bool) -> None:
        issued = agent_token_issue(
            project_id=str(obj.project_id), name=obj.name, role=obj.role, actor=admin_actor(request)
        )
        obj.pk = issued.token.pk
        obj.issued = issued  # read once by response_add; the key is never saved

    def response_add(
        self, request: HttpRequest, obj: AgentToken, post_url_continue: Any = None
    ) -> HttpResponse:
        """The one page that ever shows the key: not cached, not put in a message (messages live in a
        cookie or the session)."""
        response = TemplateResponse(
            request,
            "admin/tasks_app/agenttoken/issued.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": "Token issued",
                "token": obj.issued.token,
                "key": obj.issued.key,
            },
        )
        add_never_cache_headers(response)
        patch_cache_control(response, no_store=True)
        return response

    @admin.action(description="Revoke the selected tokens", permissions=("add",))
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        revoked = 0
        for token in queryset.filter(revoked_at__isnull=True):
            agent_token_revoke(
                token_id=str(token.id), reason="revoked in the admin", actor=admin_actor(request)
            )
            revoked += 1
        skipped = queryset.count() - revoked
        self.message_user(request, f"{revoked} token(s) revoked", messages.SUCCESS)
        if skipped:
            self.message_user(request, f"{skipped} token(s) were already revoked", messages.WARNING)


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


def _change_page(node: dict[str, Any]) -> str:
    return "admin:tasks_app_goal_change" if node["id"] == node["goal_id"] else "admin:tasks_app_task_change"


def _fork_list(nodes: list[dict[str, Any]]) -> SafeString:
    """A nested list of forks, each linked to its page, with the position it was forked at."""
    return format_html(
        "<ul>{}</ul>",
        format_html_join(
            "",
            '<li><a href="{}">{}</a> (at position {}){}</li>',
            (
                (
                    reverse(
                        "admin:tasks_app_goal_change"
                        if node["id"] == node["goal_id"]
                        else "admin:tasks_app_task_change",
                        args=[node["id"]],
                    ),
                    node["id"],
                    node["at_position"],
                    _fork_list(node["forks"]) if node["forks"] else "",
                )
                for node in nodes
            ),
        ),
    )


class ForkTreeMixin:
    """The source a goal or task was forked from and the forks made from it, as a tree."""

    @admin.display(description="forks (source → forks)")
    def fork_tree(self, task: Task) -> SafeString | str:
        return _fork_list(selectors.fork_tree(task=task)) if task.pk else ""


@admin.register(Goal)
class GoalAdmin(ForkTreeMixin, ReadOnlyAdmin):
    """Goals, their derived state, their plan and the timeline of all their tasks."""

    readonly_fields = ("fork_tree",)
    list_display = ("objective", "project", "state", "progress", "risk", "created_at", "updated_at")
    list_filter = ("state", "project")
    search_fields = ("objective",)
    exclude = ("depends_on", "attempt", "parent", "key", "ordinal")
    inlines = (PlanInline, GoalTimelineInline)

    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        return super().get_queryset(request).filter(is_goal=True)


@admin.register(Task)
class TaskAdmin(ForkTreeMixin, ReadOnlyAdmin):
    """Tasks with their lifecycle timeline. Nothing here can change a state; ``completed`` comes only from the
    verification gate."""

    readonly_fields = ("fork_tree",)
    list_display = ("key", "objective", "goal", "state", "attempt", "risk", "version", "updated_at")
    list_filter = ("state", "risk", "project")
    search_fields = ("key", "objective")
    exclude = ("progress",)
    inlines = (TimelineInline,)

    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        return super().get_queryset(request).filter(is_goal=False)
