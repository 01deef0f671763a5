"""The one event log of the whole system (SPEC E1, E4)."""

from __future__ import annotations

from django.db import models


class AppendOnlyError(Exception):
    """Raised by the model layer on any attempt to change or remove a stored event."""


class EventQuerySet(models.QuerySet):
    def update(self, **kwargs):  # type: ignore[no-untyped-def]
        raise AppendOnlyError("the event log is append-only: events cannot be updated")

    def delete(self):  # type: ignore[no-untyped-def]
        raise AppendOnlyError("the event log is append-only: events cannot be deleted")


class Event(models.Model):
    """One stored event. Written only by ``nexum.eventstore.store.append``; never updated or deleted.

    ``position`` is the event's identity in the whole log: increasing, but across projects neither gapless nor
    in commit order. ``project_position`` is its place in its project's log (events without a project form one
    more log of their own): gapless from 1 and committed in order, the cursor of every project-scoped reader.
    ``previous_hash`` and ``event_hash`` chain each project's log (``nexum.core.chain``), checked by
    ``manage.py nexum_verify_log``.
    """

    position = models.BigAutoField(primary_key=True)
    stream_id = models.CharField(max_length=200)
    version = models.PositiveIntegerField()
    event_type = models.CharField(max_length=100, db_index=True)
    schema_version = models.PositiveSmallIntegerField()
    data = models.JSONField()
    metadata = models.JSONField(default=dict)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    project_id = models.UUIDField(null=True, blank=True)
    project_position = models.BigIntegerField()
    recorded_at = models.DateTimeField()
    previous_hash = models.CharField(
        max_length=64, help_text="the hash of the project's event before this one"
    )
    event_hash = models.CharField(
        max_length=64, help_text="sha256 of this event's content and previous_hash (nexum.core.chain)"
    )

    objects = EventQuerySet.as_manager()

    class Meta:
        db_table = "nexum_event"
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["stream_id", "version"], name="nexum_event_stream_version"),
            models.UniqueConstraint(
                fields=["project_id", "project_position"], name="nexum_event_project_position"
            ),
            # The events without a project: NULLs are distinct in the index above, so this one keeps their
            # log's places unique and gives its head in one probe.
            models.UniqueConstraint(
                fields=["project_position"],
                condition=models.Q(project_id__isnull=True),
                name="nexum_event_no_project_position",
            ),
        ]
        indexes = [
            models.Index(fields=["stream_id", "idempotency_key"], name="nexum_event_idempotency"),
        ]

    def __str__(self) -> str:
        return f"#{self.position} {self.event_type} {self.stream_id}@{self.version}"

    def save(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not self._state.adding:
            raise AppendOnlyError("the event log is append-only: events cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise AppendOnlyError("the event log is append-only: events cannot be deleted")


class LogVerification(models.Model):
    """One run of ``nexum_verify_log``: when it ran, over what, and the first break it found.

    A row, not an event: verifying the log must not change it (an event would move the head just verified,
    and a run over every project would append to each), and a run is operational state like a lease, not a
    fact of any project's history. The dashboard shows the latest.
    """

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    project_id = models.UUIDField(null=True, blank=True, help_text="the project verified; empty: every one")
    projects = models.PositiveIntegerField(help_text="how many projects' logs were walked")
    events = models.PositiveBigIntegerField(help_text="how many events were checked")
    ok = models.BooleanField()
    broken_position = models.BigIntegerField(null=True, blank=True)
    broken_project_id = models.UUIDField(null=True, blank=True)
    broken_project_position = models.BigIntegerField(null=True, blank=True)
    broken_event_type = models.CharField(max_length=100, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        db_table = "nexum_log_verification"
        ordering = ["-finished_at"]

    def __str__(self) -> str:
        return f"{'ok' if self.ok else 'broken'} at {self.finished_at:%Y-%m-%d %H:%M:%S}"
