"""Appending to the one event log (SPEC E1–E3, E5, E7): an append checks its arguments, replays a retry by
its idempotency key, numbers and hashes its events after the project's head and inserts them in one statement,
then applies the projections in the same transaction. Reading the log is ``reading``; writing an exported
project's log as it was, ``importing``.

Ordering per project (issue 26). Every event has two numbers: ``position``, its identity in the whole log
(the table's identity sequence: increasing, but sequence values are handed out in call order, not commit
order, so across projects a reader can see 12 before 11 commits), and ``project_position``, its place in its
project's log, gapless from 1 (events without a project form one more log of their own). An append takes its
project's lock, a transaction-scoped advisory lock keyed by the project, before it numbers its events and
holds it until commit: within a project, appends are serialized, both numbers increase in commit order and
the committed events are at every instant a prefix of the project's log. That is the tailing-reader
guarantee, per project (``tests/integration/test_project_ordering.py``: a reader following ``after=``
through one project's events while writers append in several projects sees each exactly once, in order).
Every reader that needs it reads one project: the event feed, the SSE stream and webhooks page by
``project_position`` (``reading.read_project``). Appends in different projects never wait for each other.
Reads of the whole log (``reading.read_all`` without a project, the admin, a rebuild in one transaction) see
a consistent snapshot, but tailing the whole log by ``position`` may miss an event committed late: nothing a
client relies on does that.

Within a project ``position`` is ordered as ``project_position`` is, so read models keep keying rows and
marks by ``position`` (a unique key across projects), and a mark compared within one project means what it
did when the whole log was serialized.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.backends.postgresql.base import Cursor as ClientBindingCursor
from django.db.backends.postgresql.base import ServerBindingCursor
from django.utils import timezone

from nexum.core import chain
from nexum.core.digests import canonical_json
from nexum.core.errors import ConcurrencyError, Conflict, ValidationFailed
from nexum.core.events import DomainEvent, event_from_data, event_to_data, validate_event
from nexum.eventstore import projections, replica
from nexum.eventstore.locks import LOCK_PROJECT, PROJECT_LOCK_CLASS, lock_project
from nexum.eventstore.models import Event
from nexum.eventstore.reading import StoredEvent, stream_version

STREAM_ID_MAX = 200
IDEMPOTENCY_KEY_MAX = 200


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"


@dataclass(frozen=True)
class AppendResult:
    stream_id: str
    positions: tuple[int, ...]
    """The events' positions in the whole log."""
    project_positions: tuple[int, ...]
    """The events' places in their project's log."""
    stream_version: int
    replayed: bool
    """True when the idempotency key had been used: nothing was written, the original positions returned."""


def append(
    *,
    stream_id: str,
    events: Sequence[DomainEvent],
    expected_version: int | None,
    actor: str = "system",
    idempotency_key: str | None = None,
    project_id: str | None = None,
) -> AppendResult:
    """Append ``events`` to ``stream_id`` atomically and apply the projections in the same transaction.

    ``expected_version`` is the stream's version the caller decided on (0 for a new stream); ``None``
    skips the check. On mismatch ``ConcurrencyError`` is raised and nothing is written. A repeated
    ``idempotency_key`` in the same stream writes nothing and returns the original positions. ``actor``
    (who asked: ``agent:<name>``, ``operator:<name>``, ``gate``…) is recorded in every event's metadata, with
    the idempotency key when there is one.
    """
    _validate_arguments(stream_id, events, expected_version, idempotency_key)
    typed = [validate_event(event) for event in events]
    stored_metadata = _metadata(actor, idempotency_key)
    with transaction.atomic():
        if idempotency_key is not None:
            # The lookup must happen under the lock; otherwise the insert takes the lock itself.
            lock_project(project_id)
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
            StoredEvent(position, stream_id, version, event, stored_metadata, recorded_at, project_id, place)
            for (position, version, place), event in zip(inserted, typed, strict=True)
        ]
        projections.apply(stored)
        # Reported to the caller (``Nexum-Position``) only once committed.
        transaction.on_commit(partial(replica.note_written, project_id, inserted[-1][2]))
    return AppendResult(
        stream_id,
        tuple(row[0] for row in inserted),
        tuple(row[2] for row in inserted),
        inserted[-1][1],
        replayed=False,
    )


def append_data(*, stream_id: str, event_type: str, data: Any, **kwargs: Any) -> AppendResult:
    """Append one event given as a stored type name and JSON data (validated like any other)."""
    return append(stream_id=stream_id, events=[event_from_data(event_type, data)], **kwargs)


_INSERT_COLUMNS = (
    "INSERT INTO nexum_event (version, stream_id, event_type, schema_version, data, metadata,"
    " idempotency_key, project_id, recorded_at, project_position, previous_hash, event_hash) "
)
# The batch travels as one JSON array of [type, schema version, data, project position, previous hash, hash]
# (numbered and hashed under the project's lock, after its head); the statement numbers it after the stream's
# current version and, when a version is expected, inserts nothing unless the stream is at it.
_INSERT_BATCH = {
    "postgresql": _INSERT_COLUMNS
    + "SELECT cur.v + b.n, %(stream)s, b.item->>0, (b.item->>1)::smallint, b.item->2, %(metadata)s::jsonb,"
    " %(key)s, %(project)s::uuid, %(at)s::timestamptz, (b.item->>3)::bigint, b.item->>4, b.item->>5"
    " FROM jsonb_array_elements(%(batch)s::jsonb) WITH ORDINALITY AS b(item, n),"
    " (SELECT COALESCE(MAX(version), 0) AS v FROM nexum_event WHERE stream_id = %(stream)s) AS cur"
    " {guard} ORDER BY b.n RETURNING position, version, project_position",
    "sqlite": _INSERT_COLUMNS
    + "SELECT cur.v + b.key + 1, %(stream)s, json_extract(b.value, '$[0]'), json_extract(b.value, '$[1]'),"
    " json_extract(b.value, '$[2]'), %(metadata)s, %(key)s, %(project)s, %(at)s,"
    " json_extract(b.value, '$[3]'), json_extract(b.value, '$[4]'), json_extract(b.value, '$[5]')"
    " FROM json_each(%(batch)s) AS b,"
    " (SELECT COALESCE(MAX(version), 0) AS v FROM nexum_event WHERE stream_id = %(stream)s) AS cur"
    " {guard} ORDER BY b.key RETURNING position, version, project_position",
}
# The project's head: an equality or IS NULL (not IS NOT DISTINCT FROM), newest first, LIMIT 1, so that it is
# one probe of the (project_id, project_position) index whatever the planner estimates. Read as a statement of
# its own after the lock's: a statement sees what committed before it began, so the head is the latest.
_PROJECT_MATCH = {
    "postgresql": ("project_id = %(project)s::uuid", "project_id IS NULL"),
    "sqlite": ("project_id = %(project)s", "project_id IS NULL"),
}
_HEAD = (
    "SELECT project_position, event_hash FROM nexum_event WHERE {project}"
    " ORDER BY project_position DESC LIMIT 1"
)


def _insert(
    stream_id: str,
    typed: Sequence[DomainEvent],
    expected_version: int | None,
    metadata: dict[str, Any],
    idempotency_key: str | None,
    project_id: str | None,
    recorded_at: datetime,
    *,
    lock: bool,
) -> list[tuple[int, int, int]] | None:
    """Take the project's lock (``lock``, PostgreSQL), read its head, number and hash the batch after it and
    insert it in one statement; ``None`` when the stream is not at ``expected_version``. Returns (position,
    version, project_position) per event, in batch order."""
    in_project, without_project = _PROJECT_MATCH[connection.vendor]
    match = in_project if project_id is not None else without_project
    sql = _INSERT_BATCH[connection.vendor].format(
        guard="WHERE cur.v = %(expected)s" if expected_version is not None else ""
    )
    field = Event._meta.get_field
    params = {
        "stream": stream_id,
        "metadata": json.dumps(metadata),
        "key": idempotency_key,
        "project": field("project_id").get_db_prep_save(project_id, connection),
        "at": field("recorded_at").get_db_prep_save(recorded_at, connection),
        "expected": expected_version,
        "lock_class": PROJECT_LOCK_CLASS,
    }
    with _append_cursor() as cursor:
        if lock and connection.vendor == "postgresql":
            cursor.execute(LOCK_PROJECT, params)
        cursor.execute(_HEAD.format(project=match), params)
        head = cursor.fetchone()
        params["batch"] = _chained_batch(
            stream_id, typed, metadata, project_id, recorded_at, head or (0, chain.GENESIS)
        )
        cursor.execute(sql, params)
        rows = [tuple(row) for row in cursor.fetchall()]
    return sorted(rows, key=lambda row: row[1]) or None


def _append_cursor() -> Any:
    """The cursor an append's statements run on. On PostgreSQL it binds their parameters on the server, so
    psycopg prepares each statement once per connection (after ``NEXUM_DB_PREPARED_STATEMENTS``' threshold)
    instead of the server planning it on every append: Django's cursors inline the values, and planning the
    insert cost more than running it. Wrapped like any Django cursor (errors, query logging). A connection
    whose cursors were wrapped (psycopg's instrumentation, ``NEXUM_TRACE_SQL``) keeps its own, so every
    statement stays traced."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    connection.ensure_connection()
    if connection.connection.cursor_factory is not ClientBindingCursor:
        return connection.cursor()
    connection.validate_thread_sharing()
    cursor = ServerBindingCursor(connection.connection)
    if connection.queries_logged:
        return connection.make_debug_cursor(cursor)
    return connection.make_cursor(cursor)


def _chained_batch(
    stream_id: str,
    typed: Sequence[DomainEvent],
    metadata: dict[str, Any],
    project_id: str | None,
    recorded_at: datetime,
    head: tuple[int, str],
) -> str:
    """The batch's JSON text: each event as [type, schema version, data, project position, previous hash,
    its hash]. Each event's data is serialized once, for its hash and for the statement."""
    place, previous = head
    chained_project = str(uuid.UUID(str(project_id))) if project_id is not None else None
    metadata_text = chain.canonical_text(metadata)
    recorded_at_text = chain.timestamp_text(recorded_at)
    items = []
    for event in typed:
        place += 1
        data_text = chain.canonical_text(event_to_data(event))
        own = chain.event_hash_of_text(
            previous_hash=previous,
            stream_id=stream_id,
            event_type=event.event_type,
            schema_version=event.schema_version,
            data_text=data_text,
            metadata_text=metadata_text,
            project_id=chained_project,
            project_position=place,
            recorded_at_text=recorded_at_text,
        )
        items.append(
            f'[{chain.canonical_text(event.event_type)},{event.schema_version},{data_text},{place},"{previous}","{own}"]'
        )
        previous = own
    return "[" + ",".join(items) + "]"


class Recorded(NamedTuple):
    """One event an earlier append with an idempotency key wrote: its type and data as stored."""

    position: int
    version: int
    event_type: str
    data: Any


def replayed(
    stream_id: str,
    idempotency_key: str | None,
    *,
    same_request: Callable[[Sequence[Recorded]], bool] | None = None,
    different: str = "",
    field: str = "idempotency_key",
) -> bool:
    """Whether this request is a retry of one an earlier append with ``idempotency_key`` answered in
    ``stream_id``: the one way a service recognises a retry before it decides (a retried transition would
    otherwise be refused, the world having moved on). True: answer it again, writing nothing. The key used
    there for another request (``same_request`` says no, given what it wrote, oldest first) is 409
    ``idempotency_key_reused`` with the message ``different``. False: no key, or one not used there."""
    if idempotency_key is None:
        return False
    recorded = [
        Recorded(*row)
        for row in Event.objects.filter(stream_id=stream_id, idempotency_key=idempotency_key)
        .order_by("position")
        .values_list("position", "version", "event_type", "data")
    ]
    if not recorded:
        return False
    if same_request is not None and not same_request(recorded):
        raise IdempotencyKeyReused(different, field=field)
    return True


def _previous_append(
    stream_id: str, idempotency_key: str, typed: Sequence[DomainEvent]
) -> AppendResult | None:
    rows = list(
        Event.objects.filter(stream_id=stream_id, idempotency_key=idempotency_key)
        .order_by("position")
        .values_list("position", "version", "event_type", "data", "project_position")
    )
    if not rows:
        return None
    sent = [(event.event_type, canonical_json(event_to_data(event))) for event in typed]
    kept = [(name, canonical_json(data)) for _, _, name, data, _ in rows]
    if sent != kept:
        raise IdempotencyKeyReused(
            f"idempotency key {idempotency_key!r} was used in stream {stream_id} for different events",
            field="idempotency_key",
        )
    return AppendResult(
        stream_id, tuple(row[0] for row in rows), tuple(row[4] for row in rows), rows[-1][1], replayed=True
    )


def _validate_arguments(
    stream_id: str, events: Sequence[DomainEvent], expected_version: int | None, idempotency_key: str | None
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


def _metadata(actor: str, idempotency_key: str | None) -> dict[str, Any]:
    if not isinstance(actor, str) or not actor:
        raise ValidationFailed("actor must be a non-empty string", field="actor")
    recorded: dict[str, Any] = {"actor": actor}
    if idempotency_key is not None:
        recorded["idempotency_key"] = idempotency_key
    return recorded
