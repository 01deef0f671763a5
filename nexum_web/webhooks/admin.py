"""Webhooks in the admin: staff register one (the secret is shown once, in the page that follows) or remove
them (an action), through the same services as the API; deliveries and every attempt are read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from nexum.core.errors import DomainError
from nexum.eventstore.admin import ReadOnlyAdmin, ReadOnlyInline
from nexum_web.webhooks import services
from nexum_web.webhooks.models import SHOWN_FIELDS, Webhook, WebhookAttempt, WebhookDelivery


def _actor(request: HttpRequest) -> str:
    return f"admin:{request.user.get_username()}"


class WebhookAddForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Webhook
        fields = ("project", "url", "description")

    def clean_url(self) -> str:
        url: str = self.cleaned_data["url"]
        try:
            services.validate_url(url)
        except DomainError as error:
            raise forms.ValidationError(error.message) from None
        return url


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("url", "project", "active", "cursor", "created_by", "created_at")
    list_filter = ("active", "project")
    readonly_fields = ("project", *SHOWN_FIELDS)
    actions = ["remove_webhooks"]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = WebhookAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is not None else ()

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is not None else WebhookAddForm.Meta.fields

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Webhook, form: Any, change: bool) -> None:
        registered = services.webhook_register(
            project_id=str(obj.project_id), url=obj.url, description=obj.description, actor=_actor(request)
        )
        obj.pk = registered.webhook.pk
        obj._state.adding = False
        self.message_user(
            request,
            f"Webhook registered. Its signing secret, shown this once: {registered.secret}",
            messages.WARNING,
        )

    @admin.action(description="Remove the selected webhooks (their deliveries stay on the record)")
    def remove_webhooks(self, request: HttpRequest, queryset: QuerySet[Webhook]) -> None:
        for webhook in queryset.filter(active=True):
            services.webhook_remove(
                project_id=str(webhook.project_id), webhook_id=str(webhook.id), actor=_actor(request)
            )

    def has_remove_webhooks_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_staff)


class AttemptInline(ReadOnlyInline):
    model = WebhookAttempt
    fields = ("number", "attempted_at", "status_code", "error", "duration_ms", "response_excerpt")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ("position", "event_type", "webhook", "state", "attempts", "last_status", "requested_at")
    list_filter = ("state", "event_type")
    search_fields = ("=position", "webhook__url")
    inlines = [AttemptInline]
