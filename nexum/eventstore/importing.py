"""Importing an exported project's log (docs/EXPORT.md): its events written as they were, with their
positions, versions, times and hashes, and the projections applied, inside the importer's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from nexum.core.errors import Conflict
from nexum.eventstore import projections
from nexum.eventstore.locks import lock_project
from nexum.eventstore.models import Event
from nexum.eventstore.reading import stored_event


@dataclass(frozen=True)
class ImportedEvent:
    """An event of an exported project's log, with the numbers and hashes it had there."""

    position: int
    stream_id: str
    version: int
    event_type: str
    schema_version: int
    data: Any
    metadata: Mapping[str, Any]
    idempotency_key: str | None
    project_position: int
    recorded_at: datetime
    previous_hash: str
    event_hash: str


class ImportCollision(Conflict):
    code = "import_collision"


def import_project_log(*, project_id: str, events: Sequence[ImportedEvent], chunk_size: int = 1000) -> None:
    """Write an exported project's log as it was (positions, versions, times and hashes kept, so the chain
    and every position a read model or a stored context names stay true) and apply the projections, inside
    the caller's transaction. Refused (``import_collision``) unless the project has no event here and every
    position is free; the caller has verified the chain."""
    if not connection.in_atomic_block:
        raise RuntimeError("import_project_log runs inside the importer's transaction")
    lock_project(project_id)
    if Event.objects.filter(project_id=project_id).exists():
        raise ImportCollision(f"project {project_id} already has events here: import into an empty project")
    positions = [event.position for event in events]
    taken = list(Event.objects.filter(position__in=positions).values_list("position", flat=True)[:5])
    if taken:
        raise ImportCollision(
            f"log positions {taken} are taken here by other projects' events: import into an installation "
            "whose log does not overlap the export's positions"
        )
    for start in range(0, len(events), chunk_size):
        chunk = events[start : start + chunk_size]
        Event.objects.bulk_create(
            [
                Event(
                    position=event.position,
                    stream_id=event.stream_id,
                    version=event.version,
                    event_type=event.event_type,
                    schema_version=event.schema_version,
                    data=event.data,
                    metadata=dict(event.metadata),
                    idempotency_key=event.idempotency_key,
                    project_id=project_id,
                    project_position=event.project_position,
                    recorded_at=event.recorded_at,
                    previous_hash=event.previous_hash,
                    event_hash=event.event_hash,
                )
                for event in chunk
            ]
        )
        projections.apply(
            [
                stored_event(
                    (
                        event.position,
                        event.stream_id,
                        event.version,
                        event.event_type,
                        event.schema_version,
                        event.data,
                        event.metadata,
                        event.recorded_at,
                        project_id,
                        event.project_position,
                    )
                )
                for event in chunk
            ]
        )
    if connection.vendor == "postgresql":
        # Positions were given, not drawn: the next append must draw past them.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_get_serial_sequence('nexum_event', 'position')")
            sequence = cursor.fetchone()[0]
            cursor.execute(
                f"SELECT setval(%s, GREATEST((SELECT MAX(position) FROM nexum_event),"
                f" (SELECT last_value FROM {sequence})))",
                [sequence],
            )
