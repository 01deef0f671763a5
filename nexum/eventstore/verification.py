"""Walking the log's hash chains (``nexum.core.chain``) and recording what a walk found."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from django.utils import timezone

from nexum.core import chain
from nexum.eventstore.models import Event, LogVerification

_CHAIN_COLUMNS = (
    "position",
    "stream_id",
    "event_type",
    "schema_version",
    "data",
    "metadata",
    "project_id",
    "project_position",
    "recorded_at",
    "previous_hash",
    "event_hash",
)


def chained_events(project_id: str | None, *, chunk_size: int = 2000) -> Iterator[chain.ChainedEvent]:
    """One project's events as stored (not upcast: the chain covers what was written), in its log's order."""
    rows = (
        Event.objects.filter(project_id=project_id).order_by("project_position").values_list(*_CHAIN_COLUMNS)
    )
    for values in rows.iterator(chunk_size=chunk_size):
        (position, stream_id, name, schema_version, data, metadata, project, place, at, previous, own) = (
            values
        )
        yield chain.ChainedEvent(
            position=position,
            stream_id=stream_id,
            event_type=name,
            schema_version=schema_version,
            data=data,
            metadata=metadata,
            project_id=str(project) if project is not None else None,
            project_position=place,
            recorded_at=at,
            previous_hash=previous,
            event_hash=own,
        )


def logged_projects() -> list[str | None]:
    """Every project with events (``None``: the events without a project), in a stable order."""
    ids = Event.objects.order_by().values_list("project_id", flat=True).distinct()
    found = sorted(
        {str(value) if value is not None else None for value in ids}, key=lambda value: value or ""
    )
    return found


class _Counted:
    def __init__(self, events: Iterator[chain.ChainedEvent]) -> None:
        self.events = events
        self.count = 0

    def __iter__(self) -> Iterator[chain.ChainedEvent]:
        for event in self.events:
            self.count += 1
            yield event


def verify_log(*, project_id: str | None = None, every_project: bool = True) -> LogVerification:
    """Walk one project's chain (``every_project=False``) or every project's, stop at the first break, and
    record the run."""
    started_at = timezone.now()
    projects = logged_projects() if every_project else [project_id]
    checked = 0
    found: chain.ChainBreak | None = None
    for project in projects:
        counted = _Counted(chained_events(project))
        found = chain.first_break(counted)
        checked += counted.count
        if found is not None:
            break
    return LogVerification.objects.create(
        started_at=started_at,
        finished_at=timezone.now(),
        project_id=None if every_project else _uuid(project_id),
        projects=len(projects),
        events=checked,
        ok=found is None,
        broken_position=found.position if found else None,
        broken_project_id=_uuid(found.project_id) if found else None,
        broken_project_position=found.project_position if found else None,
        broken_event_type=found.event_type if found else "",
        message=found.describe() if found else "",
    )


def latest_verification() -> LogVerification | None:
    return LogVerification.objects.order_by("-finished_at", "-id").first()


def _uuid(value: str | None) -> uuid.UUID | None:
    return uuid.UUID(value) if value is not None else None
