"""Read-only admin of the gate (SPEC I4): contracts, gate decisions with the model's answer beside the
checks' verdict, and check runs with their output (read from the artifact store)."""

from django.contrib import admin
from django.utils.html import format_html

from context_app.world.artifacts import stored_text
from nexum.eventstore.admin import ReadOnlyAdmin, ReadOnlyInline
from verification_app.models import CheckRun, CompletionRequest, Contract


def _pre(text: str) -> str:
    return format_html('<pre style="white-space: pre-wrap; max-height: 40em; overflow: auto">{}</pre>', text)


@admin.register(Contract)
class ContractAdmin(ReadOnlyAdmin):
    list_display = (
        "task",
        "project",
        "revision",
        "require_checks",
        "on_failure",
        "approval",
        "trust_class",
        "actor",
    )
    list_filter = ("project", "on_failure", "trust_class")


class CheckRunInline(ReadOnlyInline):
    model = CheckRun
    fk_name = "request"
    fields = ("ordinal", "name", "kind", "passed", "reason", "exit_code", "duration_ms", "argv", "output")
    readonly_fields = fields
    ordering = ("ordinal",)

    @admin.display(description="output")
    def output(self, run: CheckRun) -> str:
        marker = " (truncated)" if run.truncated else ""
        return _pre(stored_text(run.output_sha256) + marker)


@admin.register(CompletionRequest)
class CompletionRequestAdmin(ReadOnlyAdmin):
    """Per task: each completion request, the model's answer, the checks' verdict and the decision."""

    list_display = ("task", "outcome", "decided", "task_version", "attempt", "requested_at", "decided_at")
    list_filter = ("outcome", "decided", "project")
    search_fields = ("=id", "=task__id")
    readonly_fields = ("model_answer",)
    exclude = ("answer_sha256",)
    inlines = (CheckRunInline,)

    @admin.display(description="model's answer (recorded, never deciding)")
    def model_answer(self, request: CompletionRequest) -> str:
        return _pre(stored_text(request.answer_sha256))


@admin.register(CheckRun)
class CheckRunAdmin(ReadOnlyAdmin):
    list_display = ("name", "request", "passed", "reason", "exit_code", "duration_ms", "recorded_at")
    list_filter = ("reason", "passed", "project")
    readonly_fields = ("output",)

    @admin.display(description="output")
    def output(self, run: CheckRun) -> str:
        marker = " (truncated)" if run.truncated else ""
        return _pre(stored_text(run.output_sha256) + marker)
