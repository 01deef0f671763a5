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
