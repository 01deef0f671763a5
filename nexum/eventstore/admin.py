from django.contrib import admin

from nexum.eventstore.models import Event


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
    list_display = ("position", "event_type", "stream_id", "version", "actor", "recorded_at")
    list_filter = ("event_type",)
    search_fields = ("=position", "stream_id", "event_type")
    ordering = ("-position",)
    show_full_result_count = False

    @admin.display(description="actor")
    def actor(self, event: Event) -> str:
        return str(event.metadata.get("actor", ""))
