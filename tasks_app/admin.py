from django.contrib import admin

from nexum.eventstore.admin import ReadOnlyAdmin
from tasks_app.models import AgentToken, Project


@admin.register(Project)
class ProjectAdmin(ReadOnlyAdmin):
    list_display = ("slug", "name", "created_at", "version")
    search_fields = ("slug", "name")


@admin.register(AgentToken)
class AgentTokenAdmin(ReadOnlyAdmin):
    list_display = ("name", "project", "key_prefix", "issued_at", "revoked_at")
    list_filter = ("project",)
    exclude = ("key_sha256",)
