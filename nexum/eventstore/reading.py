"""Reading the one event log: a stream (or a few as of a position), the whole log or one project's in order,
the heads, and a consistent read of one project. Events come back upcast to their current schema
(``StoredEvent``). Within a project, appends commit in order (``store``): what a reader of one project sees is
a prefix of its log.

A compile reads the world without any lock: ``consistent_read`` gives it the world as of its project's head
from a REPEATABLE READ snapshot, and the compile's own ``ContextCompiled`` is then an ordinary short append.
Since a project's appends commit in order, the project's events a snapshot sees are exactly those up to the
project's highest position in it, and the read models it sees (written in the same transactions) are the
project's state as of that position. On SQLite every write transaction begins with ``BEGIN IMMEDIATE``
(settings), which serializes every append anyway.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, connections, transaction

from nexum.core.events import DomainEvent, event_from_data, event_to_data, upcast
from nexum.eventstore import replica
from nexum.eventstore.locks import lock_project
from nexum.eventstore.models import Event


@dataclass(frozen=True)
class StoredEvent:
    """An event as read back from the log, upcast to its current schema."""

    position: int
    stream_id: str
    version: int
    event: DomainEvent
    metadata: Mapping[str, Any]
    recorded_at: datetime
    project_id: str | None
    project_position: int

    @property
    def event_type(self) -> str:
        return self.event.event_type

    @property
    def data(self) -> dict[str, Any]:
        return event_to_data(self.event)


def stream_version(stream_id: str) -> int:
    version = (
        Event.objects.filter(stream_id=stream_id)
        .order_by("-version")
        .values_list("version", flat=True)
        .first()
    )
    return version or 0


def read_stream(stream_id: str, *, until_position: int | None = None) -> list[StoredEvent]:
    rows = Event.objects.filter(stream_id=stream_id)
    if until_position is not None:
        rows = rows.filter(position__lte=until_position)
    return [stored_event(values) for values in rows.order_by("version").values_list(*_COLUMNS)]


def read_streams(stream_ids: Iterable[str], *, until_position: int) -> list[StoredEvent]:
    """The events of the given streams up to log ``until_position``, in log order (one query): what a few
    read-model rows as of a past position are folded from."""
    rows = Event.objects.filter(stream_id__in=sorted(set(stream_ids)), position__lte=until_position)
    return [stored_event(values) for values in rows.order_by("position").values_list(*_COLUMNS)]


def read_all(
    *, after: int = 0, limit: int | None = None, project_id: str | None = None, until: int | None = None
) -> list[StoredEvent]:
    """Events with position > ``after`` in position order (optionally one project's, up to ``until``)."""
    return list(iter_all(after=after, limit=limit, project_id=project_id, until=until))


def iter_all(
    *,
    after: int = 0,
    limit: int | None = None,
    project_id: str | None = None,
    until: int | None = None,
    chunk_size: int = 2000,
    event_types: Iterable[str] | None = None,
) -> Iterator[StoredEvent]:
    """Events with position > ``after`` in position order. One project's are read on its
    ``(project_id, project_position)`` index, which orders them as their positions do: ``until`` becomes the
    project's place of its last event at or below it."""
    rows = Event.objects.filter(position__gt=after)
    if event_types is not None:
        rows = rows.filter(event_type__in=sorted(event_types))
    if project_id is None:
        if until is not None:
            rows = rows.filter(position__lte=until)
        rows = rows.order_by("position")
    else:
        rows = rows.filter(project_id=project_id)
        if until is not None:
            rows = rows.filter(project_position__lte=_place_at_or_below(project_id, until))
        rows = rows.order_by("project_position")
    if limit is not None:
        rows = rows[:limit]
    for values in rows.values_list(*_COLUMNS).iterator(chunk_size=chunk_size):
        yield stored_event(values)


def _place_at_or_below(project_id: str, position: int) -> int:
    """The project's place of its last event at or below log ``position`` (0: none)."""
    place = (
        Event.objects.filter(project_id=project_id, position__lte=position)
        .order_by("-project_position")
        .values_list("project_position", flat=True)
        .first()
    )
    return place or 0


def read_project(project_id: str | None, *, after: int = 0, limit: int | None = None) -> list[StoredEvent]:
    """One project's events with ``project_position`` > ``after``, in order (``None``: the events without a
    project). A reader that follows ``after=`` sees every event of the project exactly once, in order."""
    rows = Event.objects.filter(project_id=project_id, project_position__gt=after).order_by(
        "project_position"
    )
    if limit is not None:
        rows = rows[:limit]
    return [stored_event(values) for values in rows.values_list(*_COLUMNS)]


def head_position() -> int:
    """The highest position in the whole log (not a point every lower position has reached: see ``store``)."""
    return Event.objects.order_by("-position").values_list("position", flat=True).first() or 0


def project_head(project_id: str | None) -> tuple[int, int]:
    """The project's last event as ``(position, project_position)``, ``(0, 0)`` for an empty project. Every
    event of the project up to it is committed: appends in one project commit in order."""
    last = (
        Event.objects.filter(project_id=project_id)
        .order_by("-project_position")
        .values_list("position", "project_position")
        .first()
    )
    return last or (0, 0)


_COLUMNS = (
    "position",
    "stream_id",
    "version",
    "event_type",
    "schema_version",
    "data",
    "metadata",
    "recorded_at",
    "project_id",
    "project_position",
)


def stored_event(values: tuple[Any, ...]) -> StoredEvent:
    """The event of a row read as ``_COLUMNS``, upcast to its current schema."""
    (position, stream_id, version, name, schema_version, data, metadata, recorded_at, project_id, place) = (
        values
    )
    event = event_from_data(name, upcast(name, schema_version, data))
    return StoredEvent(
        position,
        stream_id,
        version,
        event,
        metadata,
        recorded_at,
        str(project_id) if project_id is not None else None,
        place,
    )


@contextlib.contextmanager
def consistent_read(project_id: str | None) -> Iterator[int]:
    """A read-only view of one project's log and read models as of its last event, whose ``position`` is
    yielded, taken without the project's lock: appends go on meanwhile, unseen.

    On PostgreSQL outside any transaction, a ``REPEATABLE READ READ ONLY`` transaction (its snapshot is
    taken by its first query, which reads the project's head). Inside a caller's transaction the isolation
    level can no longer be chosen, so the project's lock is taken instead (until that transaction ends). On
    SQLite the transaction's ``BEGIN IMMEDIATE`` already keeps every writer out.
    """
    alias = replica.current_read_alias()
    if alias != replica.PRIMARY:
        # A hot standby: its REPEATABLE READ snapshot is a prefix of every project's log, and no lock is
        # needed (nothing can be written there).
        with transaction.atomic(using=alias):
            with connections[alias].cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield project_head(project_id)[0]
        return
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield project_head(project_id)[0]
        return
    with transaction.atomic():
        lock_project(project_id)
        yield project_head(project_id)[0]
