"""Appending to and reading from the one event log (SPEC E1–E3, E5, E7).

Global order. Positions come from the table's identity sequence, and PostgreSQL hands out sequence values
in call order, not commit order: without care, a reader tailing ``after=P`` could read position 12 while
position 11 is still uncommitted, move on, and never see 11. We serialize appends with a table lock
(``LOCK TABLE … IN EXCLUSIVE MODE``, as the ``eventsourcing`` library's PostgreSQL recorder does): the lock
is held from before the sequence is called until commit, so positions become visible strictly in order. It
blocks only other appends, never readers. On SQLite every write transaction begins with ``BEGIN IMMEDIATE``
(settings), which is the same serialization.

Why a lock held to commit rather than a sequence plus a committed high-water mark (issue 15). The tailing
reader (``tests/integration/test_event_store.py``: a reader following ``after=`` while writers append
concurrently must see every event exactly once, in order) needs the committed positions to be a prefix at
every instant. A high-water mark gives that only to readers that consult it: every ``read_all``/``iter_all``
caller, the feed and the projections' rebuild would read up to a mark computed per read, lagging the log,
and a writer that dies between taking its position and committing stalls the mark until it is noticed. The
lock costs an append only the other appends' insert, projections and commit (a few milliseconds, see
bench/append.py); what made it a bottleneck was the compiles that held it through a whole read and compile.
Those no longer take it: ``consistent_read`` gives a compile the world as of one position from a
REPEATABLE READ snapshot, and the compile's own ``ContextCompiled`` is then an ordinary short append. Since
appends commit in position order, the events any snapshot sees are exactly those up to its highest
position, and the read models it sees (written in the same transactions) are the state as of that position.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from nexum.core.digests import canonical_json
from nexum.core.errors import ConcurrencyError, Conflict, ValidationFailed
from nexum.core.events import Event, event_from_data, event_to_data, upcast, validate_event
from nexum.eventstore import projections
from nexum.eventstore.models import Event as EventRow

METADATA_KEYS = ("actor", "causation_id", "correlation_id")
STREAM_ID_MAX = 200
IDEMPOTENCY_KEY_MAX = 200


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"


@dataclass(frozen=True)
class StoredEvent:
    """An event as read back from the log, upcast to its current schema."""

    position: int
    stream_id: str
    version: int
    event: Event
    metadata: Mapping[str, Any]
    recorded_at: datetime
    project_id: str | None

    @property
    def event_type(self) -> str:
        return self.event.event_type

    @property
    def data(self) -> dict[str, Any]:
        return event_to_data(self.event)


@dataclass(frozen=True)
class AppendResult:
    stream_id: str
    positions: tuple[int, ...]
    stream_version: int
    replayed: bool
    """True when the idempotency key had been used: nothing was written, the original positions returned."""


def append(
    *,
    stream_id: str,
    events: Sequence[Event],
    expected_version: int | None,
    idempotency_key: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    project_id: str | None = None,
) -> AppendResult:
    """Append ``events`` to ``stream_id`` atomically and apply the projections in the same transaction.

    ``expected_version`` is the stream's version the caller decided on (0 for a new stream); ``None``
    skips the check. On mismatch ``ConcurrencyError`` is raised and nothing is written. A repeated
    ``idempotency_key`` in the same stream writes nothing and returns the original positions.
    """
    _check_arguments(stream_id, events, expected_version, idempotency_key)
    typed = [validate_event(event) for event in events]
    stored_metadata = _metadata(metadata, idempotency_key)
    with transaction.atomic():
        if idempotency_key is not None:
            # The lookup must happen under the lock; otherwise the insert takes the lock itself.
            lock_log()
            previous = _previous_append(stream_id, idempotency_key, typed)
            if previous is not None:
                return previous
        recorded_at = timezone.now()
        inserted = _insert(
            stream_id,
            typed,
            expected_version,
            stored_metadata,
            idempotency_key,
            project_id,
            recorded_at,
            lock=idempotency_key is None,
        )
        if inserted is None:
            current = stream_version(stream_id)
            raise ConcurrencyError(
                f"stream {stream_id} is at version {current}, not the expected {expected_version}",
                field="expected_version",
                details={
                    "stream_id": stream_id,
                    "current_version": current,
                    "expected_version": expected_version,
                },
            )
        stored = [
            StoredEvent(position, stream_id, version, event, stored_metadata, recorded_at, project_id)
            for (position, version), event in zip(inserted, typed, strict=True)
        ]
        projections.apply(stored)
    return AppendResult(stream_id, tuple(p for p, _ in inserted), inserted[-1][1], replayed=False)


def append_data(*, stream_id: str, event_type: str, data: Any, **kwargs: Any) -> AppendResult:
    """Append one event given as a stored type name and JSON data (validated like any other)."""
    return append(stream_id=stream_id, events=[event_from_data(event_type, data)], **kwargs)


def stream_version(stream_id: str) -> int:
    version = (
        EventRow.objects.filter(stream_id=stream_id)
        .order_by("-version")
        .values_list("version", flat=True)
        .first()
    )
    return version or 0


def read_stream(stream_id: str, *, until_position: int | None = None) -> list[StoredEvent]:
    rows = EventRow.objects.filter(stream_id=stream_id)
    if until_position is not None:
        rows = rows.filter(position__lte=until_position)
    return [_stored(values) for values in rows.order_by("version").values_list(*_COLUMNS)]


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
    rows = EventRow.objects.filter(position__gt=after)
    if event_types is not None:
        rows = rows.filter(event_type__in=sorted(event_types))
    if project_id is not None:
        rows = rows.filter(project_id=project_id)
    if until is not None:
        rows = rows.filter(position__lte=until)
    rows = rows.order_by("position")
    if limit is not None:
        rows = rows[:limit]
    for values in rows.values_list(*_COLUMNS).iterator(chunk_size=chunk_size):
        yield _stored(values)


def head_position() -> int:
    return EventRow.objects.order_by("-position").values_list("position", flat=True).first() or 0


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
)


def _stored(values: tuple[Any, ...]) -> StoredEvent:
    position, stream_id, version, name, schema_version, data, metadata, recorded_at, project_id = values
    event = event_from_data(name, upcast(name, schema_version, data))
    return StoredEvent(
        position,
        stream_id,
        version,
        event,
        metadata,
        recorded_at,
        str(project_id) if project_id is not None else None,
    )


# ``LOCK TABLE nexum_event IN EXCLUSIVE MODE``, through the owner's SECURITY DEFINER function: the runtime
# role holds no UPDATE, DELETE or TRUNCATE on the log, which PostgreSQL requires for that lock mode (see
# migration 0003).
LOCK_LOG = "SELECT nexum_event_lock()"

_INSERT_COLUMNS = (
    "INSERT INTO nexum_event (version, stream_id, event_type, schema_version, data, metadata,"
    " idempotency_key, project_id, recorded_at) "
)
# The batch travels as one JSON array of [type, schema version, data]; the statement numbers it after the
# stream's current version and, when a version is expected, inserts nothing unless the stream is at it.
_INSERT_BATCH = {
    "postgresql": _INSERT_COLUMNS
    + "SELECT cur.v + b.n, %(stream)s, b.item->>0, (b.item->>1)::smallint, b.item->2, %(metadata)s::jsonb,"
    " %(key)s, %(project)s::uuid, %(at)s::timestamptz"
    " FROM jsonb_array_elements(%(batch)s::jsonb) WITH ORDINALITY AS b(item, n),"
    " (SELECT COALESCE(MAX(version), 0) AS v FROM nexum_event WHERE stream_id = %(stream)s) AS cur"
    " {guard} ORDER BY b.n RETURNING position, version",
    "sqlite": _INSERT_COLUMNS
    + "SELECT cur.v + b.key + 1, %(stream)s, json_extract(b.value, '$[0]'), json_extract(b.value, '$[1]'),"
    " json_extract(b.value, '$[2]'), %(metadata)s, %(key)s, %(project)s, %(at)s"
    " FROM json_each(%(batch)s) AS b,"
    " (SELECT COALESCE(MAX(version), 0) AS v FROM nexum_event WHERE stream_id = %(stream)s) AS cur"
    " {guard} ORDER BY b.key RETURNING position, version",
}


def _insert(
    stream_id: str,
    typed: Sequence[Event],
    expected_version: int | None,
    metadata: dict[str, Any],
    idempotency_key: str | None,
    project_id: str | None,
    recorded_at: datetime,
    *,
    lock: bool,
) -> list[tuple[int, int]] | None:
    """Insert the batch in one statement; ``None`` when the stream is not at ``expected_version``.

    On PostgreSQL, ``lock`` sends the table lock in the same round trip as the insert. Returns
    (position, version) per event, in batch order.
    """
    sql = _INSERT_BATCH[connection.vendor].format(
        guard="WHERE cur.v = %(expected)s" if expected_version is not None else ""
    )
    field = EventRow._meta.get_field
    params = {
        "stream": stream_id,
        "metadata": json.dumps(metadata),
        "key": idempotency_key,
        "project": field("project_id").get_db_prep_save(project_id, connection),
        "at": field("recorded_at").get_db_prep_save(recorded_at, connection),
        "batch": json.dumps(
            [[event.event_type, event.schema_version, event_to_data(event)] for event in typed]
        ),
        "expected": expected_version,
    }
    with connection.cursor() as cursor:
        if lock and connection.vendor == "postgresql":
            cursor.execute(f"{LOCK_LOG}; {sql}", params)
            cursor.nextset()
        else:
            cursor.execute(sql, params)
        rows = [(position, version) for position, version in cursor.fetchall()]
    return sorted(rows, key=lambda row: row[1]) or None


@contextlib.contextmanager
def consistent_read() -> Iterator[int]:
    """A read-only view of the log and every read model as of one log position, yielded, taken without the
    append lock: appends go on meanwhile, unseen.

    On PostgreSQL outside any transaction, a ``REPEATABLE READ READ ONLY`` transaction (its snapshot is
    taken by its first query, which reads the head position). Inside a caller's transaction the isolation
    level can no longer be chosen, so the append lock is taken instead (until that transaction ends, as
    before issue 15). On SQLite the transaction's ``BEGIN IMMEDIATE`` already keeps every writer out.
    """
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield head_position()
        return
    with transaction.atomic():
        lock_log()
        yield head_position()


def lock_log() -> None:
    """Hold the log's append lock until commit, so no event lands meanwhile (PostgreSQL; on SQLite the
    transaction already began with ``BEGIN IMMEDIATE``)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(LOCK_LOG)


def appended_with_key(stream_id: str, idempotency_key: str) -> list[tuple[int, int, str, Any]]:
    """What an append with ``idempotency_key`` wrote to ``stream_id``, oldest first, a row
    ``(position, version, event_type, data)``; empty when the key is unused there. For services that must
    recognise a retry before deciding (a retried transition would otherwise be refused: it has moved on)."""
    return list(
        EventRow.objects.filter(stream_id=stream_id, idempotency_key=idempotency_key)
        .order_by("position")
        .values_list("position", "version", "event_type", "data")
    )


def _previous_append(stream_id: str, idempotency_key: str, typed: Sequence[Event]) -> AppendResult | None:
    rows = appended_with_key(stream_id, idempotency_key)
    if not rows:
        return None
    sent = [(event.event_type, canonical_json(event_to_data(event))) for event in typed]
    kept = [(name, canonical_json(data)) for _, _, name, data in rows]
    if sent != kept:
        raise IdempotencyKeyReused(
            f"idempotency key {idempotency_key!r} was used in stream {stream_id} for different events",
            field="idempotency_key",
        )
    return AppendResult(stream_id, tuple(row[0] for row in rows), rows[-1][1], replayed=True)


def _check_arguments(
    stream_id: str, events: Sequence[Event], expected_version: int | None, idempotency_key: str | None
) -> None:
    if not isinstance(stream_id, str) or not stream_id or len(stream_id) > STREAM_ID_MAX:
        raise ValidationFailed(
            f"stream id must be a non-empty string of at most {STREAM_ID_MAX} characters", field="stream_id"
        )
    if not events:
        raise ValidationFailed("an append needs at least one event", field="events")
    if expected_version is not None and (
        not isinstance(expected_version, int) or isinstance(expected_version, bool) or expected_version < 0
    ):
        raise ValidationFailed("expected_version must be a non-negative integer", field="expected_version")
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str)
        or not idempotency_key
        or len(idempotency_key) > IDEMPOTENCY_KEY_MAX
    ):
        raise ValidationFailed(
            f"idempotency key must be 1–{IDEMPOTENCY_KEY_MAX} characters", field="idempotency_key"
        )


def _metadata(metadata: Mapping[str, Any] | None, idempotency_key: str | None) -> dict[str, Any]:
    supplied = dict(metadata or {})
    if not all(isinstance(key, str) for key in supplied):
        raise ValidationFailed("metadata keys must be strings", field="metadata")
    try:
        canonical_json(supplied)
    except (TypeError, ValueError) as error:
        raise ValidationFailed(f"metadata must be JSON: {error}", field="metadata") from error
    supplied.setdefault("actor", "system")
    if idempotency_key is not None:
        supplied["idempotency_key"] = idempotency_key
    return supplied
