from collections.abc import Callable

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from nexum.core.errors import DomainError
from nexum.eventstore.models import Event, LogVerification


def admin_actor(request: HttpRequest) -> str:
    """How the log names a staff user acting in the admin (as an operator)."""
    return f"admin:{request.user.get_username()}"


def validated_by(rule: Callable[[str], str], value: str) -> str:
    """A form field's value checked by a core rule (the one its service applies): a refusal becomes the
    field's error, with the rule's message."""
    try:
        return rule(value)
    except DomainError as error:
        raise forms.ValidationError(error.message) from error


class _NoChanges:
    """Nothing may be added, changed or deleted: read models mirror the log, the log is append-only."""

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


class ReadOnlyAdmin(_NoChanges, admin.ModelAdmin):
    """An admin that shows and never changes: read models mirror the log, the log is append-only."""

    actions = None


class ReadOnlyInline(_NoChanges, admin.TabularInline):
    """A tabular inline that shows and never changes (no blank rows, no delete boxes)."""

    extra = 0
    can_delete = False


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = (
        "position",
        "project_id",
        "project_position",
        "event_type",
        "stream_id",
        "version",
        "actor",
        "recorded_at",
    )
    list_filter = ("event_type",)
    search_fields = ("=position", "stream_id", "event_type")
    ordering = ("-position",)
    show_full_result_count = False

    @admin.display(description="actor")
    def actor(self, event: Event) -> str:
        return str(event.metadata.get("actor", ""))


@admin.register(LogVerification)
class LogVerificationAdmin(ReadOnlyAdmin):
    """The runs of ``nexum_verify_log``, newest first (written by the command only)."""

    list_display = ("finished_at", "ok", "project_id", "projects", "events", "broken_position", "message")
    list_filter = ("ok",)
    ordering = ("-finished_at",)
