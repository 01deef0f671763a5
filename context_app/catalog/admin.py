"""Admin for the model catalog. Cards, aliases and the overlay audit trail mirror the log and are read-only.
Overlays are editable (SPEC I4), but never through the ORM: the form checks the value with the same decision
the API uses and ``save_model``/``delete_model`` call the audited services, so every edit is an event that
records who, when, the old and the new value (SPEC O7).

Projects are created here, not in ``tasks_app.admin``: a new project gets the default model catalog
(``services.project_setup``), and this is the lowest layer that knows both."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from context_app.catalog import selectors, services
from context_app.catalog.models import CatalogAlias, CatalogCard, ModelOverlay, ModelOverlayChange
from context_app.catalog.projections import word_row_id
from nexum.core.catalog.changes import decide_overlay_set
from nexum.core.errors import DomainError
from nexum.core.tasks.projects import validate_project_name, validate_relevance_floor, validate_slug
from nexum.eventstore.admin import ReadOnlyAdmin, admin_actor, validated_by
from tasks_app.models import Project
from tasks_app.services.projects import project_relevance_floor_set

ADMIN_WHERE = "admin"
OVERLAY_FIELDS = ("context_tokens", "auto_compact_tokens", "enabled")


class ProjectCreateForm(forms.ModelForm):
    """The slug and name are checked by the rules the service applies; a taken slug is refused by the model's
    unique constraint, before anything is written."""

    class Meta:
        model = Project
        fields = ("slug", "name", "description")

    def clean_slug(self) -> str:
        return validated_by(validate_slug, self.cleaned_data["slug"])

    def clean_name(self) -> str:
        return validated_by(validate_project_name, self.cleaned_data["name"])


class ProjectSettingsForm(forms.ModelForm):
    """What an operator may change on a project here: its relevance floor, checked by the service's rule."""

    relevance_floor = forms.FloatField(
        required=False,
        help_text="0 to 1 (0: no floor); empty: the service's NEXUM_RELEVANCE_FLOOR",
    )

    class Meta:
        model = Project
        fields = ("relevance_floor",)

    def clean_relevance_floor(self) -> float | None:
        try:
            return validate_relevance_floor(self.cleaned_data["relevance_floor"])
        except DomainError as error:
            raise forms.ValidationError(error.message) from error


@admin.register(Project)
class ProjectAdmin(ReadOnlyAdmin):
    """Projects; "Add" creates one with the default model catalog, as an event through the service; a
    project's relevance floor is changed the same way (an event, who and when in the log)."""

    form = ProjectCreateForm
    list_display = ("slug", "name", "relevance_floor", "created_at", "version")
    search_fields = ("slug", "name")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return admin.ModelAdmin.has_add_permission(self, request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return admin.ModelAdmin.has_change_permission(self, request, obj)

    def get_form(self, request: HttpRequest, obj: Project | None = None, change: bool = False, **kwargs: Any):  # type: ignore[no-untyped-def]
        if obj is not None:
            kwargs["form"] = ProjectSettingsForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Project | None = None) -> tuple[str, ...]:
        create = ("slug", "name", "description")
        return create if obj is None else (*create, "relevance_floor", "created_at", "version")

    def get_readonly_fields(self, request: HttpRequest, obj: Project | None = None) -> tuple[str, ...]:
        return () if obj is None else ("slug", "name", "description", "created_at", "version")

    def save_model(self, request: HttpRequest, obj: Project, form: Any, change: bool) -> None:
        if change:
            project_relevance_floor_set(
                project_id=str(obj.pk),
                relevance_floor=form.cleaned_data["relevance_floor"],
                actor=admin_actor(request),
            )
            return
        project, _ = services.project_setup(
            slug=obj.slug, name=obj.name, description=obj.description, actor=admin_actor(request)
        )
        obj.pk = project.pk


@admin.register(CatalogCard)
class CatalogCardAdmin(ReadOnlyAdmin):
    list_display = (
        "word",
        "project",
        "model_id",
        "tier",
        "context_window",
        "max_output_tokens",
        "latency_class",
        "encoding",
        "updated_at",
    )
    list_filter = ("project", "tier")
    search_fields = ("word", "model_id")


@admin.register(CatalogAlias)
class CatalogAliasAdmin(ReadOnlyAdmin):
    list_display = ("word", "kind", "target", "project", "updated_at")
    list_filter = ("project", "kind")
    search_fields = ("word", "target")


@admin.register(ModelOverlayChange)
class ModelOverlayChangeAdmin(ReadOnlyAdmin):
    list_display = ("position", "project", "word", "old", "new", "actor", "recorded_at")
    list_filter = ("project",)
    search_fields = ("word", "actor")


class ModelOverlayForm(forms.ModelForm):
    """The overlay's members, left to the core's value gate (a number below 1 is refused there, by name)."""

    context_tokens = forms.IntegerField(
        required=False, help_text="lowers the model's window; never raises it"
    )
    auto_compact_tokens = forms.IntegerField(required=False, help_text="compaction trigger window")
    enabled = forms.NullBooleanField(required=False, help_text="compaction default; unknown: on")

    class Meta:
        model = ModelOverlay
        fields = ("project", "word", *OVERLAY_FIELDS)

    def overlay_value(self) -> dict[str, Any]:
        return {name: self.cleaned_data.get(name) for name in OVERLAY_FIELDS}

    def target(self) -> tuple[Any, str | None]:
        if self.instance.pk is not None:
            return self.instance.project_id, self.instance.word
        project = self.cleaned_data.get("project")
        return (project.id if project is not None else None), self.cleaned_data.get("word")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        project_id, word = self.target()
        if project_id is None or not word or self.errors:
            return cleaned
        try:
            decide_overlay_set(
                selectors.catalog_state_for(str(project_id)), word, self.overlay_value(), where=ADMIN_WHERE
            )
        except DomainError as error:
            field = error.field if error.field in self.fields else None
            self.add_error(field, error.message)
        return cleaned


@admin.register(ModelOverlay)
class ModelOverlayAdmin(admin.ModelAdmin):
    form = ModelOverlayForm
    actions = None
    list_display = (
        "word",
        "project",
        "context_tokens",
        "auto_compact_tokens",
        "enabled",
        "updated_by",
        "updated_at",
    )
    list_filter = ("project",)
    search_fields = ("word",)

    def get_readonly_fields(self, request: HttpRequest, obj: ModelOverlay | None = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        return ("project", "word", "updated_by", "updated_at", "recent_changes")

    def get_fields(self, request: HttpRequest, obj: ModelOverlay | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("project", "word", *OVERLAY_FIELDS)
        return ("project", "word", *OVERLAY_FIELDS, "updated_by", "updated_at", "recent_changes")

    @admin.display(description="changes (who, when, old, new)")
    def recent_changes(self, obj: ModelOverlay) -> str:
        changes = ModelOverlayChange.objects.filter(project_id=obj.project_id, word=obj.word)[:20]
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((change.actor, change.recorded_at, change.old, change.new) for change in changes),
        )
        return format_html(
            "<table><tr><th>who</th><th>when</th><th>old</th><th>new</th></tr>{}</table>", rows
        )

    def save_model(
        self, request: HttpRequest, obj: ModelOverlay, form: ModelOverlayForm, change: bool
    ) -> None:
        services.model_overlay_set(
            project_id=str(obj.project_id),
            word=obj.word,
            overlay=form.overlay_value(),
            actor=admin_actor(request),
            where=ADMIN_WHERE,
        )
        obj.pk = word_row_id(obj.project_id, obj.word)

    def delete_model(self, request: HttpRequest, obj: ModelOverlay) -> None:
        services.model_overlay_clear(
            project_id=str(obj.project_id), word=obj.word, actor=admin_actor(request), where=ADMIN_WHERE
        )
