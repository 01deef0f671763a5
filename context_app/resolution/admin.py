"""Admin for the context resolver: read-only mirrors of the log (SPEC I4). Bundles show their items with trust
badges, stale marks, conflict groups side by side and denials; escalations show what is missing, why, and the
evidence; retrievals are the history. Changes happen only through services: an operator overrides the plan
gate with an admin action that calls ``plan_gate_override`` (recorded as an event)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from context_app.resolution import selectors
from context_app.resolution.models import (
    Escalation,
    Grant,
    Resolve,
    ResolveRequest,
    Retrieval,
    Source,
    TaskContext,
)
from context_app.resolution.services.plan_gate import plan_gate_override
from nexum.core.durations import human_duration
from nexum.core.errors import DomainError, NotFound
from nexum.eventstore.admin import ReadOnlyAdmin

TRUST_COLOURS = {
    "untrusted_retrieved": "#b00020",
    "agent_reported": "#b26a00",
    "repository_authored": "#555",
    "signed_skill": "#1565c0",
    "signed_policy": "#2e7d32",
    "kernel": "#000",
}


def _badge(trust: str) -> str:
    return format_html(
        '<span style="color:#fff;background:{};padding:1px 5px;border-radius:3px">{}</span>',
        TRUST_COLOURS.get(trust, "#b00020"),
        trust,
    )


@admin.register(Source)
class SourceAdmin(ReadOnlyAdmin):
    list_display = (
        "name", "kind", "project", "highest_trust", "writable_by", "declared_scopes", "ttl", "registered_at"
    )  # fmt: skip
    list_filter = ("project", "kind")
    search_fields = ("name",)

    @admin.display(description="TTL", ordering="ttl_seconds")
    def ttl(self, source: Source) -> str:
        return human_duration(source.ttl_seconds) if source.ttl_seconds else "none"


@admin.register(Grant)
class GrantAdmin(ReadOnlyAdmin):
    list_display = ("id", "project", "goal_id", "task_id", "scopes", "expires_at", "revoked_at", "actor")
    list_filter = ("project",)


@admin.register(Retrieval)
class RetrievalAdmin(ReadOnlyAdmin):
    list_display = ("position", "project", "task_id", "source", "outcome", "code", "scopes", "recorded_at")
    list_filter = ("project", "outcome", "code")
    search_fields = ("source", "=task_id", "=resolve_id")


@admin.register(ResolveRequest)
class ResolveRequestAdmin(ReadOnlyAdmin):
    list_display = ("request_id", "task_id", "status", "bundle_digest", "requested_at", "finished_at")
    list_filter = ("status",)
    search_fields = ("=request_id", "=task_id", "=bundle_digest")


@admin.register(Resolve)
class BundleAdmin(ReadOnlyAdmin):
    """One row per resolve; the detail page shows the bundle."""

    list_display = ("bundle_digest", "task_id", "complete", "stop_reason", "item_count", "denial_count",
                    "source_error_count", "recorded_at")  # fmt: skip
    list_filter = ("project", "complete", "stop_reason")
    search_fields = ("bundle_digest", "=task_id")
    readonly_fields = ("bundle_view", "retrievals_view")
    fields = ("bundle_digest", "task_id", "complete", "stop_reason", "risk", "tokens_used", "actor",
              "recorded_at", "bundle_view", "retrievals_view")  # fmt: skip

    @admin.display(description="bundle")
    def bundle_view(self, resolve: Resolve) -> str:
        try:
            bundle = selectors.bundle_content(digest=resolve.bundle_digest)
        except NotFound as gone:  # pruned by retention: the message says when
            return gone.message
        rejected = selectors.rejected_digests(goal_id=resolve.goal_id, items=bundle["items"])
        items = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td><pre style='white-space:pre-wrap'>{}</pre></td></tr>",
            (
                (
                    _badge(item["trust_class"]),
                    f"{item['source']}:{item['locator']}",
                    ("STALE: " + (item.get("stale_reason") or "")) if item.get("stale") else "",
                    (item.get("conflict_group") or "")[:12],
                    ", ".join(item.get("labels") or []) + (" REJECTED" if item["digest"] in rejected else ""),
                    item["text"][:2000],
                )
                for item in bundle["items"]
            ),
        )
        groups = format_html_join(
            "",
            "<h4>conflict on {}</h4><table><tr>{}</tr></table>",
            (
                (
                    group["subject"],
                    format_html_join(
                        "",
                        "<td style='vertical-align:top;border:1px solid #ccc'>{}<br>{}<br><pre>{}</pre></td>",
                        (
                            (
                                _badge(member["trust_class"]),
                                f"{member['source']}:{member['locator']}",
                                next(
                                    (
                                        i["text"][:1000]
                                        for i in bundle["items"]
                                        if i["digest"] == member["digest"]
                                    ),
                                    "(not selected)",
                                ),
                            )
                            for member in group["members"]
                        ),
                    ),
                )
                for group in bundle["conflict_groups"]
            ),
        )
        denials = format_html_join(
            "", "<li>{} {}: {}</li>", ((d["source"], d["code"], d["reason"]) for d in bundle["denials"])
        )
        errors = format_html_join(
            "",
            "<li>{} ({}): {}</li>",
            ((e["source"], e["kind"], e["reason"]) for e in bundle["source_errors"]),
        )
        left_out = format_html_join(
            "",
            "<li>{}:{} — {}</li>",
            ((x["source"], x["locator"], x["reason"]) for x in bundle["left_out_by_budget"]),
        )
        return format_html(
            "<p>complete: {} — stop: {} — {}</p><table><tr><th>trust</th><th>origin</th><th>stale</th>"
            "<th>conflict</th><th>labels</th><th>text</th></tr>{}</table>{}<h4>denials</h4><ul>{}</ul>"
            "<h4>source errors</h4><ul>{}</ul><h4>left out by budget</h4><ul>{}</ul>",
            bundle["complete"],
            bundle["stop_reason"],
            "; ".join(bundle["incomplete_reasons"]),
            items,
            groups,
            denials,
            errors,
            left_out,
        )

    @admin.display(description="retrievals")
    def retrievals_view(self, resolve: Resolve) -> str:
        return format_html_join(
            "",
            "<li>{} {} {} {} {}</li>",
            (
                (r.outcome, r.source, ", ".join(r.scopes), r.code, f"{len(r.item_digests)} items")
                for r in selectors.retrievals_of(resolve_id=resolve.id)
            ),
        )


@admin.register(Escalation)
class EscalationAdmin(ReadOnlyAdmin):
    list_display = ("kind", "missing", "task_id", "state", "resolution", "opened_at", "resolved_at")
    list_filter = ("project", "state", "kind")
    search_fields = ("missing", "=task_id")
    actions = ["override_plan_gate"]

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return admin.ModelAdmin.get_actions(self, request)

    @admin.action(description="Override the plan gate for these escalations' tasks (operator)")
    def override_plan_gate(self, request: HttpRequest, queryset: Any) -> None:
        for task_id, project_id in sorted({(e.task_id, e.project_id) for e in queryset}):
            try:
                plan_gate_override(
                    project_id=str(project_id),
                    task_id=str(task_id),
                    reason=f"operator override from the admin by {request.user.get_username()}",
                    actor=f"admin:{request.user.get_username()}",
                )
            except DomainError as error:
                self.message_user(request, f"{task_id}: {error.message}", messages.ERROR)
            else:
                self.message_user(request, f"plan gate overridden for task {task_id}")


@admin.register(TaskContext)
class TaskContextAdmin(ReadOnlyAdmin):
    list_display = ("task_id", "project", "latest_bundle_digest", "complete", "stop_reason", "override_actor")
    list_filter = ("project", "complete")
