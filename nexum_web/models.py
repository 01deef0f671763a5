"""The web layer's operational state: the event streams open now, across every process of the server.

Like ``nexum.work``'s ``Work`` rows, these are not read models: nothing of the log is in them, a rebuild never
touches them, and losing them loses nothing but the count (``nexum_web/api/stream_slots.py``).
"""

from __future__ import annotations

import uuid

from django.db import models


class EventStreamLease(models.Model):
    """One open event stream: the token it serves, the process serving it, and the stream's deadline. The row
    is deleted when the stream's response is closed; one whose process died counts until a grace after the
    deadline, then not at all."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    token_id = models.UUIDField(db_index=True)
    project_id = models.UUIDField(help_text="the token's project")
    holder = models.CharField(max_length=200, help_text="host:pid of the process serving the stream")
    opened_at = models.DateTimeField()
    closes_at = models.DateTimeField(db_index=True, help_text="the stream's deadline")

    class Meta:
        verbose_name = "open event stream"

    def __str__(self) -> str:
        return f"stream of token {self.token_id} ({self.holder}, until {self.closes_at:%H:%M:%S})"


class StreamTicket(models.Model):
    """A short-lived, single-use credential for one event stream, for a browser's ``EventSource`` (which
    cannot send an Authorization header): issued to a token, it opens one stream of that token's project with
    that token's role, once, before ``expires_at``. Only the sha256 of the ticket is kept."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    secret_sha256 = models.CharField(max_length=64, unique=True)
    token_id = models.UUIDField(db_index=True)
    project_id = models.UUIDField()
    role = models.CharField(max_length=8)
    issued_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "event stream ticket"

    def __str__(self) -> str:
        return f"stream ticket of token {self.token_id} (until {self.expires_at:%H:%M:%S})"
