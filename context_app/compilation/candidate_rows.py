"""The queries that read a task's candidate rows for the candidate cache (``candidates``): the metadata of the
items the task sees whose rows changed after a log position, with their stored vectors, in one query, and the
task's marks (where its goal's rows and its folds stand, with the fingerprints of the events there).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, NamedTuple

from django.db.models import (
    BinaryField,
    BooleanField,
    Case,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    TextField,
    Value,
    When,
)
from django.db.models.expressions import RawSQL

from context_app.compilation.models import CompactionFold, FoldedItem
from context_app.world.models import ItemVector, WorldItem
from nexum.core.world.items import FACT_CURRENT
from nexum.eventstore.models import Event
from nexum.eventstore.replica import read_connection
from tasks_app.models import Task

RANKED_KINDS = ("fact", "tool_call")  # ranked by relevance: their terms are needed


class CandidateRow(NamedTuple):
    """One world item's metadata as the candidate query reads it."""

    id: str
    kind: str
    tokens: int | None
    """The stored token count in the compile's encoding; ``None``: not counted in it (the text is)."""
    line_count: int
    position: int
    verified: bool
    trust_class: str
    source: str
    own: bool
    """The task's own item (not shared by the goal)."""
    status: str
    ranked_terms: str
    """The relevance terms of the kinds ranked by relevance (``RANKED_KINDS``); empty for the others."""
    changed_position: int
    ranked_entities: str = ""
    """The named entities of the kinds ranked by relevance, joined by spaces; empty for the others."""
    vector: bytes | None = None
    """The stored vector of a ranked kind by the embedder the rows were read for; ``None``: none stored (or
    no embedder, or another kind)."""


class Marks(NamedTuple):
    """Where a task's candidates stood: the last log position that changed a row of its goal and the
    position of its last fold (-1: none), each with the stream and version of the event at that position
    (its fingerprint: a position a rolled-back transaction used is gone, or, on SQLite, reused by another
    event)."""

    high: int
    high_event: str | None
    fold_high: int
    fold_event: str | None


NO_MARKS = Marks(-1, None, -1, None)


def seen_by(task: Task) -> Q:
    """Which items of its goal a task sees: the shared ones and its own (a goal sees the shared ones)."""
    shared = Q(task_id__isnull=True)
    return shared if task.is_goal else shared | Q(task_id=task.id)


def task_items(task: Task) -> QuerySet[WorldItem]:
    """The items the task sees (its goal's shared ones and its own, current facts only), folded ones out."""
    items = WorldItem.objects.filter(
        seen_by(task),
        project_id=task.project_id,
        goal_id=task.goal_id,
        status=FACT_CURRENT,
    )
    folded = FoldedItem.objects.filter(task_id=task.id).values("item_id")
    return items.exclude(id__in=folded)


def stored_tokens(encoding: str) -> RawSQL:
    """A world item's stored token count in ``encoding`` as an integer (NULL when not counted), read by the
    database so no ``token_counts`` JSON is decoded in Python."""
    table = read_connection.ops.quote_name(WorldItem._meta.db_table)
    if read_connection.vendor == "postgresql":
        return RawSQL(f"({table}.token_counts ->> %s)::integer", (encoding,))
    return RawSQL(f"json_extract({table}.token_counts, %s)", (f'$."{encoding}"',))


def _id_text() -> RawSQL:
    table = read_connection.ops.quote_name(WorldItem._meta.db_table)
    return RawSQL(f"{table}.id::text" if read_connection.vendor == "postgresql" else f"{table}.id", ())


def changed_rows(
    task: Task, encoding: str, since: int, ids: Iterable[str] | None = None, embedder: str = ""
) -> list[CandidateRow]:
    """Every item the task sees whose row changed after log position ``since`` (whatever its status now),
    in one query on the ``(goal_id, changed_position)`` index, which covers it on PostgreSQL (a goal id is
    unique across projects, so no other index can serve it), the ranked kinds with their stored vector by
    ``embedder`` (a probe of the vectors' unique index per row, in the same query: no second round trip
    carrying thousands of ids). With ``ids``, the rows of those items instead, whenever they changed (a
    fold's entries)."""
    where = Q(changed_position__gt=since) if ids is None else Q(id__in=[uuid.UUID(item) for item in ids])
    if embedder:
        stored = ItemVector.objects.filter(item_id=OuterRef("id"), embedder=embedder).order_by()
        stored = stored.values("vector")
        vector: Any = Case(
            When(kind__in=RANKED_KINDS, then=Subquery(stored[:1], output_field=BinaryField())),
            default=Value(None),
            output_field=BinaryField(),
        )
    else:
        vector = Value(None, output_field=BinaryField())
    rows = (
        WorldItem.objects.filter(seen_by(task), where, goal_id=task.goal_id)
        .annotate(
            item_text_id=_id_text(),
            tokens=stored_tokens(encoding),
            own=ExpressionWrapper(Q(task_id__isnull=False), output_field=BooleanField()),
            ranked_terms=Case(
                When(kind__in=RANKED_KINDS, then=F("terms_text")), default=Value(""), output_field=TextField()
            ),
            ranked_entities=Case(
                When(kind__in=RANKED_KINDS, then=F("entities_text")),
                default=Value(""),
                output_field=TextField(),
            ),
            ranked_vector=vector,
        )
        .values_list(
            "item_text_id",
            "kind",
            "tokens",
            "line_count",
            "position",
            "verified",
            "trust_class",
            "source",
            "own",
            "status",
            "ranked_terms",
            "changed_position",
            "ranked_entities",
            "ranked_vector",
        )
        .order_by()
    )
    sql, params = rows.query.sql_with_params()
    with read_connection.cursor() as cursor:
        cursor.execute(sql, params)
        fetched = cursor.fetchall()
    if read_connection.vendor == "postgresql":
        return [CandidateRow._make(row) for row in fetched]
    return [CandidateRow(_canonical_uuid(row[0]), *row[1:]) for row in fetched]


def task_marks(task: Task, known: Marks) -> tuple[Marks, Marks]:
    """The task's marks now, and the fingerprints of the events at the ``known`` marks' positions now, in
    one query of index probes."""
    items = read_connection.ops.quote_name(WorldItem._meta.db_table)
    folds = read_connection.ops.quote_name(CompactionFold._meta.db_table)
    events = read_connection.ops.quote_name(Event._meta.db_table)
    goal_id, task_id = task.goal_id, task.id
    if read_connection.vendor != "postgresql":  # SQLite keeps UUIDs as 32 hex digits
        goal_id, task_id = uuid.UUID(str(goal_id)).hex, uuid.UUID(str(task_id)).hex

    def event_at(position: str) -> str:
        return f"(SELECT stream_id || '@' || CAST(version AS TEXT) FROM {events} WHERE position = {position})"

    with read_connection.cursor() as cursor:
        cursor.execute(
            f"SELECT h.p, {event_at('h.p')}, f.p, {event_at('f.p')}, {event_at('%s')}, {event_at('%s')}"
            f" FROM (SELECT MAX(changed_position) AS p FROM {items} WHERE goal_id = %s) AS h,"
            f" (SELECT MAX(position) AS p FROM {folds} WHERE task_id = %s) AS f",
            [known.high, known.fold_high, goal_id, task_id],
        )
        high, high_event, fold_high, fold_event, known_high_event, known_fold_event = cursor.fetchone()
    now = Marks(
        -1 if high is None else int(high), high_event, -1 if fold_high is None else int(fold_high), fold_event
    )
    return now, known._replace(high_event=known_high_event, fold_event=known_fold_event)


def _canonical_uuid(value: Any) -> str:
    text = str(value)
    if len(text) == 32:  # SQLite keeps UUIDs as 32 hex digits
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
    return text
