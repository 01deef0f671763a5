"""Webhooks, their deliveries and each attempt: operational state beside the log (like ``nexum_work``), not
read models. What happened is in the log; these rows say where it was sent and how that went. A rebuild of
the read models never touches them.

The secret is kept here because every delivery is signed with it; it is never written to the log, never shown
after the answer that created the webhook, and never listed by the API or the admin.
"""

from __future__ import annotations

import uuid

from django.db import models

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
DELIVERY_STATES = [
    (PENDING, "pending"),
    (DELIVERED, "delivered"),
    (FAILED, "failed (gave up)"),
]


# What the API and the admin show of a webhook (never its secret).
SHOWN_FIELDS = (
    "id",
    "url",
    "description",
    "active",
    "cursor",
    "created_by",
    "created_at",
    "removed_by",
    "removed_at",
)


class Webhook(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Projects are a read model (a rebuild truncates and refills them): no database constraint on it.
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="webhooks", db_constraint=False
    )
    url = models.CharField(max_length=2000, help_text="http(s); its host must be on NEXUM_SOURCE_HTTP_ALLOW")
    description = models.CharField(max_length=500, blank=True)
    secret = models.CharField(max_length=200, editable=False)
    active = models.BooleanField(default=True)
    cursor = models.BigIntegerField(
        default=0,
        help_text="position in the project's log up to which this webhook's deliveries are recorded",
    )
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    removed_by = models.CharField(max_length=200, blank=True)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.url} ({'active' if self.active else 'removed'})"


class WebhookDelivery(models.Model):
    """One event to send to one webhook, until it is answered with a 2xx (or the attempts run out).

    ``requested_at`` is when the next attempt is due: the dispatcher (``nexum.work``) sends a pending delivery
    that is overdue and unleased again, as it does completion requests."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    project_id = models.UUIDField()
    task_id = models.UUIDField(null=True, blank=True, help_text="unused: work kinds list one")
    position = models.BigIntegerField(
        help_text="the event's position in the project's log: its id for receivers"
    )
    event_type = models.CharField(max_length=100)
    state = models.CharField(max_length=16, choices=DELIVERY_STATES, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    requested_at = models.DateTimeField(help_text="when the next attempt is due")
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_status = models.IntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["position"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["webhook", "position"], name="webhooks_delivery_once"),
        ]
        indexes = [
            models.Index(fields=["state", "requested_at"], name="webhooks_delivery_due"),
            models.Index(
                fields=["project_id", "state", "requested_at"], name="webhooks_delivery_project_due"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.position} {self.event_type} → {self.webhook.url} ({self.state})"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    project_id = models.UUIDField(help_text="the delivery's project: every row knows its project")
    number = models.PositiveIntegerField()
    attempted_at = models.DateTimeField()
    status_code = models.IntegerField(null=True, blank=True, help_text="none: no answer")
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(
        null=True, blank=True, help_text="none: no outcome recorded (in progress, or its worker stopped)"
    )
    response_excerpt = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhooks_attempt_number"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number}: {self.status_code or self.error}"
