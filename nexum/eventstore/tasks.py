"""Celery tasks of the event store. Each takes ids only and is idempotent under redelivery."""

from __future__ import annotations

from celery import shared_task

from nexum.core.tasks.projects import HealthPinged
from nexum.eventstore import store

HEALTH_STREAM = "system-health"


@shared_task(name="nexum.health_ping")
def record_health_ping(ping_id: str) -> int:
    """Append a ``HealthPinged`` event keyed by ``ping_id``: a redelivered message writes nothing new."""
    result = store.append(
        stream_id=HEALTH_STREAM,
        events=[HealthPinged(ping_id=ping_id)],
        expected_version=None,
        idempotency_key=ping_id,
        actor="worker",
    )
    return result.positions[0]
