"""Stored item vectors: read them for the items a compile reads, store the ones a compile had to make, and
fill in the items stored before vectors existed (``manage.py nexum_embed``).

A vector is a pure function of the item's text (``meaning_text``) and the embedder, so making one
twice gives the same bytes; storing is idempotent (one row per item and embedder).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from context_app.world.models import ItemVector, WorldItem, item_vector_id
from nexum.adapters.embedding import Embedder, embedder_id
from nexum.core.world.entities import entities_of
from nexum.core.world.items import MEANING_KINDS, meaning_text
from nexum.eventstore.replica import read_connection

READ_CHUNK = 900  # ids per query on SQLite (its bound-parameter limit); PostgreSQL takes one array
FILL_BATCH = 1000


@dataclass(frozen=True)
class NewVector:
    """A vector made for an item that had none by ``embedder``, to be stored."""

    item_id: str
    project_id: str
    embedder: str
    vector: bytes


def stored_vectors(item_ids: Sequence[str], embedder: str) -> dict[str, bytes]:
    """The stored vectors by ``embedder`` of the given items (an item without one is absent)."""
    if not item_ids or not embedder:
        return {}
    if read_connection.vendor == "postgresql":
        table = read_connection.ops.quote_name(ItemVector._meta.db_table)
        with read_connection.cursor() as cursor:
            cursor.execute(
                f"SELECT item_id::text, vector FROM {table}"
                " WHERE embedder = %s AND item_id = ANY(%s::uuid[])",
                [embedder, list(item_ids)],
            )
            return {item_id: bytes(vector) for item_id, vector in cursor.fetchall()}
    found: dict[str, bytes] = {}
    for start in range(0, len(item_ids), READ_CHUNK):
        chunk = [uuid.UUID(item_id) for item_id in item_ids[start : start + READ_CHUNK]]
        rows = ItemVector.objects.filter(embedder=embedder, item_id__in=chunk).values_list(
            "item_id", "vector"
        )
        found.update((str(item_id), bytes(vector)) for item_id, vector in rows)
    return found


def meaning_texts(item_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``item id → (project id, meaning text)`` of the given facts and tool calls, read from their rows."""
    texts: dict[str, tuple[str, str]] = {}
    for start in range(0, len(item_ids), READ_CHUNK):
        chunk = [uuid.UUID(item_id) for item_id in item_ids[start : start + READ_CHUNK]]
        rows = WorldItem.objects.filter(id__in=chunk, kind__in=MEANING_KINDS).values_list(
            "id", "project_id", "kind", "text", "subject", "tool", "arguments_digest"
        )
        for item_id, project_id, kind, text, subject, tool, arguments_digest in rows:
            fields = {"text": text, "subject": subject, "tool": tool, "arguments_digest": arguments_digest}
            texts[str(item_id)] = (str(project_id), meaning_text(kind, fields) or "")
    return texts


def embed_items(item_ids: Sequence[str], embedder: Embedder) -> list[NewVector]:
    """Vectors for the given items by ``embedder``, made in one ``embed`` call (not stored)."""
    texts = meaning_texts(item_ids)
    wanted = [item_id for item_id in item_ids if item_id in texts]
    name = embedder_id(embedder)
    vectors = embedder.embed([texts[item_id][1] for item_id in wanted])
    return [
        NewVector(item_id, texts[item_id][0], name, vector)
        for item_id, vector in zip(wanted, vectors, strict=True)
    ]


def store_vectors(new: Iterable[NewVector]) -> int:
    """Store vectors made outside a projection (a compile's, the fill command's); one already stored for
    the item and embedder is kept. Returns how many were offered."""
    rows = [
        ItemVector(
            id=item_vector_id(entry.item_id, entry.embedder),
            project_id=entry.project_id,
            item_id=entry.item_id,
            embedder=entry.embedder,
            vector=entry.vector,
        )
        for entry in new
    ]
    ItemVector.objects.bulk_create(rows, ignore_conflicts=True, batch_size=FILL_BATCH)
    return len(rows)


def fill_vectors(
    *, embedder: Embedder, project_id: str | None = None, batch: int = FILL_BATCH
) -> tuple[int, int]:
    """Give every fact and tool call (of one project, or all) that has none a vector by ``embedder`` and
    its entities, ``batch`` items per ``embed`` call and per transaction's worth of rows. Returns (vectors
    stored, entity rows updated)."""
    name = embedder_id(embedder)
    items = WorldItem.objects.filter(kind__in=MEANING_KINDS)
    if project_id is not None:
        items = items.filter(project_id=project_id)
    with_vector = ItemVector.objects.filter(embedder=name).values("item_id")
    missing = [str(item_id) for item_id in items.exclude(id__in=with_vector).values_list("id", flat=True)]
    stored = 0
    for start in range(0, len(missing), batch):
        stored += store_vectors(embed_items(missing[start : start + batch], embedder))
    return stored, fill_entities(project_id=project_id, batch=batch)


def fill_entities(*, project_id: str | None = None, batch: int = FILL_BATCH) -> int:
    """Compute the entities of facts and tool calls that have none recorded (rows stored before entities
    existed; a text with no entity is computed again, to the same empty answer). Returns rows updated."""
    items = WorldItem.objects.filter(kind__in=MEANING_KINDS, entities_text="")
    if project_id is not None:
        items = items.filter(project_id=project_id)
    changed: list[WorldItem] = []
    updated = 0
    rows = items.values_list("id", "kind", "text", "subject", "tool", "arguments_digest")
    for item_id, kind, text, subject, tool, arguments_digest in rows.iterator(chunk_size=batch):
        fields = {"text": text, "subject": subject, "tool": tool, "arguments_digest": arguments_digest}
        found = " ".join(entities_of(meaning_text(kind, fields) or ""))
        if found:
            changed.append(WorldItem(id=item_id, entities_text=found))
    for start in range(0, len(changed), batch):
        WorldItem.objects.bulk_update(changed[start : start + batch], ["entities_text"])
        updated += len(changed[start : start + batch])
    return updated
