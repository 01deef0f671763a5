"""Read-only admin pages for compiled contexts (SPEC I4, C8, C12): the prompt block, tokens per section
against the budget, the exclusions with their reasons, the truncations, the position, and links to replay
the context and to diff it with the task's previous compile. Replay and diff only read."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse

from context_app.compilation.models import CompactionFold, ContextCompilation, ContextUsage, StoredContext
from context_app.compilation.selectors.contexts import (
    context_diff,
    iter_excluded,
    previous_context,
    section_rows,
    task_compilations,
)
from context_app.compilation.selectors.usage import drift_per_card
from context_app.compilation.services.replays import context_content, context_replay
from nexum.core.errors import DomainError
from nexum.eventstore.admin import ReadOnlyAdmin

EXCLUDED_SHOWN = 500


@admin.register(StoredContext)
class CompiledContextAdmin(ReadOnlyAdmin):
    list_display = (
        "short_digest",
        "task_id",
        "model_word",
        "position",
        "total_tokens",
        "excluded_count",
        "embedder",
    )
    list_filter = ("model_word", "project")
    search_fields = ("=digest", "=task_id")
    ordering = ("-position",)
    change_form_template = "admin/compilation/storedcontext/change_form.html"

    @admin.display(description="digest")
    def short_digest(self, context: StoredContext) -> str:
        return context.digest[:16]

    def get_urls(self):  # type: ignore[no-untyped-def]
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/replay/", view(self.replay_view), name="compilation_storedcontext_replay"),
            path(
                "<path:object_id>/diff/<path:other_id>/",
                view(self.diff_view),
                name="compilation_storedcontext_diff",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ):  # type: ignore[no-untyped-def]
        context = get_object_or_404(StoredContext, pk=object_id)
        previous = previous_context(context)
        result = context_content(context)  # recompiled and verified when retention pruned it
        excluded = list(iter_excluded(result))
        extra = {
            "compiled": context,
            "prompt_block": result.prompt_block,
            "sections": section_rows(context),
            "excluded": excluded[:EXCLUDED_SHOWN],
            "excluded_total": len(excluded),
            "excluded_shown": min(len(excluded), EXCLUDED_SHOWN),
            "excluded_by_reason": result.exclusion_summary()["by_reason"],
            "truncated": result.truncated,
            "compiles": task_compilations(project_id=context.project_id, task_id=context.task_id),
            "replay_url": reverse("admin:compilation_storedcontext_replay", args=[context.pk]),
            "diff_url": (
                reverse("admin:compilation_storedcontext_diff", args=[previous.pk, context.pk])
                if previous
                else None
            ),
            "previous": previous,
        }
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **extra})

    def replay_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        context = get_object_or_404(StoredContext, pk=object_id)
        outcome, refusal = None, None
        try:
            outcome = context_replay(project_id=str(context.project_id), digest=context.digest)
        except DomainError as error:  # e.g. the embedder it was compiled with cannot be loaded here
            refusal = error.message
        return TemplateResponse(
            request,
            "admin/compilation/storedcontext/replay.html",
            {
                **self.admin_site.each_context(request),
                "compiled": context,
                "outcome": outcome,
                "refusal": refusal,
                "opts": self.model._meta,
            },
        )

    def diff_view(self, request: HttpRequest, object_id: str, other_id: str) -> HttpResponse:
        before = get_object_or_404(StoredContext, pk=object_id)
        after = get_object_or_404(StoredContext, pk=other_id, project_id=before.project_id)
        diff = context_diff(before_result=context_content(before), after_result=context_content(after))
        return TemplateResponse(
            request,
            "admin/compilation/storedcontext/diff.html",
            {
                **self.admin_site.each_context(request),
                "before": before,
                "after": after,
                "diff": diff,
                "opts": self.model._meta,
            },
        )


@admin.register(ContextCompilation)
class ContextCompilationAdmin(ReadOnlyAdmin):
    list_display = ("request_id", "task_id", "model_word", "status", "digest", "position", "requested_at")
    list_filter = ("status", "model_word")
    search_fields = ("=request_id", "=task_id", "=digest")


@admin.register(CompactionFold)
class CompactionFoldAdmin(ReadOnlyAdmin):
    list_display = (
        "fold_id",
        "task_id",
        "summary_id",
        "folded_tokens",
        "threshold",
        "position",
        "recorded_at",
    )
    search_fields = ("=task_id",)


@admin.register(ContextUsage)
class ContextUsageAdmin(ReadOnlyAdmin):
    """The usage ledger: each provider report against Nexum's count, with the drift per card above the list
    (issue 28)."""

    list_display = (
        "short_digest",
        "card_word",
        "provider",
        "provider_model",
        "nexum_tokens",
        "prompt_tokens",
        "completion_tokens",
        "drift_percent",
        "cost",
        "recorded_at",
    )
    list_filter = ("card_word", "provider", "project")
    search_fields = ("=digest", "=task_id", "=goal_id")
    ordering = ("-position",)
    change_list_template = "admin/compilation/contextusage/change_list.html"

    @admin.display(description="digest")
    def short_digest(self, usage: ContextUsage) -> str:
        return usage.digest[:16]

    @admin.display(description="drift")
    def drift_percent(self, usage: ContextUsage) -> str:
        return "" if usage.drift is None else f"{usage.drift:+.1%}"

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
        drifts = [
            (drift, f"{drift.summary.p50:+.1%}", f"{drift.summary.p95:+.1%}") for drift in drift_per_card()
        ]
        return super().changelist_view(request, {**(extra_context or {}), "card_drifts": drifts})
