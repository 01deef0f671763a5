"""World-state read models from the log: items (with the current view of facts), their vectors, tools and
tool scopes.

A fact or tool call (``world.MEANING_KINDS``) gets its named entities on its row and its vector by the
configured embedder (``ItemVector``) when its row is written, in the same transaction: the texts of a batch of
events (one append, or a thousand events of a rebuild) are embedded in one call (``settle``).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from context_app.world.embedder import configured_embedder
from context_app.world.models import ItemVector, Tool, ToolScope, WorldItem, item_vector_id
from nexum.adapters.embedding import embedder_id
from nexum.core.events import event_to_data
from nexum.core.ids import as_uuid
from nexum.core.world.entities import entities_of
from nexum.core.world.items import (
    FACT_CURRENT,
    FACT_RETRACTED,
    FACT_SUPERSEDED,
    ArtifactRecorded,
    DecisionRecorded,
    FactRecorded,
    FactRetracted,
    FactSuperseded,
    FactVerified,
    FailureRecorded,
    ItemsCarried,
    ItemTokensCounted,
    ProgressRecorded,
    ToolCallRecorded,
    ToolDefined,
    ToolRemoved,
    ToolScopeSet,
    _ItemRecorded,
    line_count,
    meaning_text,
    render_item,
)
from nexum.eventstore.projections import Projection, ReadModelRows, handles
from nexum.eventstore.reading import StoredEvent


class WorldProjection(Projection):
    models = (WorldItem, ItemVector, Tool, ToolScope)

    def _recorded(self, stored: StoredEvent, rows: ReadModelRows, kind: str, **extra: Any) -> None:
        event: _ItemRecorded = stored.event  # type: ignore[assignment]
        fields = {**event_to_data(event), **extra}
        rendered = render_item(kind, fields)
        meaning = meaning_text(kind, fields)
        item_id = as_uuid(event.item_id)
        project_id = as_uuid(stored.project_id)
        if meaning is not None:
            self.defer((item_id, project_id, meaning, None))
        rows.insert(
            WorldItem,
            id=item_id,
            project_id=project_id,
            goal_id=as_uuid(event.goal_id),
            task_id=as_uuid(event.task_id) if event.task_id else None,
            kind=kind,
            text=event.text,
            rendered=rendered,
            token_counts=dict(event.token_counts),
            line_count=line_count(rendered),
            terms=list(event.terms),
            terms_text=" ".join(event.terms),
            entities_text=" ".join(entities_of(meaning)) if meaning is not None else "",
            trust_class=event.trust_class,
            source=fields.get("source") or "",
            actor=str(stored.metadata.get("actor", "")),
            position=stored.position,
            changed_position=stored.position,
            recorded_at=stored.recorded_at,
            updated_at=stored.recorded_at,
            version=stored.version,
            subject=fields.get("subject") or "",
            observed_at=fields.get("observed_at") or None,
            verified=bool(fields.get("verified")),
            status=FACT_CURRENT,
            supersedes=as_uuid(fields["supersedes"]) if fields.get("supersedes") else None,
            superseded_by=None,
            rationale=fields.get("rationale") or "",
            attempt=fields.get("attempt"),
            uri=fields.get("uri") or "",
            excerpt=fields.get("excerpt") or "",
            media_type=fields.get("media_type") or "",
            content_sha256=fields.get("content_sha256") or "",
            content_size=fields.get("content_size"),
            tool=fields.get("tool") or "",
            arguments_digest=fields.get("arguments_digest") or "",
        )

    def settle(self, deferred: list[Any], rows: ReadModelRows) -> None:
        """The vectors of the items recorded in the batch, by the configured embedder, in one call; a carried
        item's is its origin's (a vector is a function of the text and the embedder alone), the others are
        made. A past state's rows (``state_as_of``) get none: a replay embeds the few items its compile
        reads, by the embedder that compile recorded."""
        embedder = configured_embedder()
        if embedder is None or getattr(rows, "transient", False):
            return
        name = embedder_id(embedder)
        origins = [origin for *_, origin in deferred if origin is not None]
        known = {
            row["item_id"]: row["vector"]
            for row in rows.get_many(
                ItemVector, [item_vector_id(origin, name) for origin in origins]
            ).values()
        }
        vectors = {item_id: bytes(known[origin]) for item_id, _, _, origin in deferred if origin in known}
        missing = [entry for entry in deferred if entry[0] not in vectors]
        made = embedder.embed([entry[2] for entry in missing]) if missing else []
        vectors.update((entry[0], vector) for entry, vector in zip(missing, made, strict=True))
        rows.insert_many(
            ItemVector,
            [
                {
                    "id": item_vector_id(item_id, name),
                    "project_id": project_id,
                    "item_id": item_id,
                    "embedder": name,
                    "vector": vectors[item_id],
                }
                for item_id, project_id, *_ in deferred
            ],
        )

    @handles(FactRecorded)
    def fact_recorded(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: FactRecorded = stored.event  # type: ignore[assignment]
        observed = _datetime(event.observed_at) or stored.recorded_at
        self._recorded(stored, rows, "fact", observed_at=observed)

    @handles(DecisionRecorded)
    def decision_recorded(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        self._recorded(stored, rows, "decision")

    @handles(FailureRecorded)
    def failure_recorded(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        self._recorded(stored, rows, "failure")

    @handles(ArtifactRecorded)
    def artifact_recorded(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ArtifactRecorded = stored.event  # type: ignore[assignment]
        self._recorded(stored, rows, "artifact", source=event.uri)

    @handles(ProgressRecorded)
    def progress_recorded(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        self._recorded(stored, rows, "progress")

    @handles(ToolCallRecorded)
    def tool_call_recorded(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ToolCallRecorded = stored.event  # type: ignore[assignment]
        self._recorded(stored, rows, "tool_call", source=event.tool)

    @handles(ItemsCarried)
    def items_carried(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        """A fork's items, each as its origin stood (``ItemsCarried``), written at once: the origin's
        place in the recorded order (``position``), this event's as the last change; version 0, since the
        item's own stream holds no event yet. Their vectors are the origins' (``settle``)."""
        event: ItemsCarried = stored.event  # type: ignore[assignment]
        project_id = as_uuid(stored.project_id)
        goal_id = as_uuid(event.goal_id)
        scopes = {fields["task_id"] for fields in event.items}
        task_ids = {task_id: as_uuid(task_id) if task_id else None for task_id in scopes}
        carried = []
        for fields in event.items:
            kind = fields["kind"]
            rendered = render_item(kind, fields)
            meaning = meaning_text(kind, fields)
            item_id, origin = uuid.UUID(fields["item_id"]), uuid.UUID(fields["forked_from"])
            if meaning is not None:
                self.defer((item_id, project_id, meaning, origin))
            carried.append(
                {
                    "id": item_id,
                    "project_id": project_id,
                    "goal_id": goal_id,
                    "task_id": task_ids[fields["task_id"]],
                    "kind": kind,
                    "text": fields["text"],
                    "rendered": rendered,
                    "token_counts": dict(fields["token_counts"]),
                    "line_count": line_count(rendered),
                    "terms": list(fields["terms"]),
                    "terms_text": " ".join(fields["terms"]),
                    "entities_text": fields["entities_text"],
                    "trust_class": fields["trust_class"],
                    "source": fields["source"],
                    "actor": fields["actor"],
                    "position": fields["position"],
                    "changed_position": stored.position,
                    "recorded_at": stored.recorded_at,
                    "updated_at": stored.recorded_at,
                    "version": 0,
                    "forked_from": origin,
                    "subject": fields["subject"],
                    "observed_at": _datetime(fields["observed_at"]),
                    "verified": fields["verified"],
                    "status": fields["status"],
                    "supersedes": as_uuid(fields["supersedes"]) if fields["supersedes"] else None,
                    "superseded_by": as_uuid(fields["superseded_by"]) if fields["superseded_by"] else None,
                    "rationale": fields["rationale"],
                    "attempt": fields["attempt"],
                    "uri": fields["uri"],
                    "excerpt": fields["excerpt"],
                    "media_type": fields["media_type"],
                    "content_sha256": fields["content_sha256"],
                    "content_size": fields["content_size"],
                    "tool": fields["tool"],
                    "arguments_digest": fields["arguments_digest"],
                }
            )
        rows.insert_many(WorldItem, carried)

    @handles(FactVerified)
    def fact_verified(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: FactVerified = stored.event  # type: ignore[assignment]
        rows.update(
            WorldItem,
            as_uuid(event.fact_id),
            verified=True,
            updated_at=stored.recorded_at,
            version=stored.version,
            changed_position=stored.position,
        )

    @handles(FactSuperseded)
    def fact_superseded(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: FactSuperseded = stored.event  # type: ignore[assignment]
        rows.update(
            WorldItem,
            as_uuid(event.fact_id),
            status=FACT_SUPERSEDED,
            superseded_by=as_uuid(event.superseded_by),
            updated_at=stored.recorded_at,
            version=stored.version,
            changed_position=stored.position,
        )

    @handles(FactRetracted)
    def fact_retracted(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: FactRetracted = stored.event  # type: ignore[assignment]
        rows.update(
            WorldItem,
            as_uuid(event.fact_id),
            status=FACT_RETRACTED,
            updated_at=stored.recorded_at,
            version=stored.version,
            changed_position=stored.position,
        )

    @handles(ItemTokensCounted)
    def tokens_counted(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ItemTokensCounted = stored.event  # type: ignore[assignment]
        for item_id, tokens in sorted(event.counts.items()):
            row = rows.get(WorldItem, as_uuid(item_id))
            if row is not None:
                counts = {**row["token_counts"], event.encoding: tokens}
                rows.update(
                    WorldItem,
                    as_uuid(item_id),
                    token_counts=dict(sorted(counts.items())),
                    changed_position=stored.position,
                )

    @handles(ToolDefined)
    def tool_defined(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ToolDefined = stored.event  # type: ignore[assignment]
        fields = {
            "name": event.name,
            "description": event.description,
            "schema": dict(event.schema),
            "pinned": event.pinned,
            "score": event.score,
            "token_counts": dict(event.token_counts),
            "terms": list(event.terms),
            "updated_at": stored.recorded_at,
            "version": stored.version,
        }
        tool_id = as_uuid(event.tool_id)
        if rows.get(Tool, tool_id) is None:
            rows.insert(
                Tool,
                id=tool_id,
                project_id=as_uuid(stored.project_id),
                created_at=stored.recorded_at,
                **fields,
            )
        else:
            rows.update(Tool, tool_id, **fields)

    @handles(ToolRemoved)
    def tool_removed(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ToolRemoved = stored.event  # type: ignore[assignment]
        rows.delete(Tool, as_uuid(event.tool_id))

    @handles(ToolScopeSet)
    def tool_scope_set(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ToolScopeSet = stored.event  # type: ignore[assignment]
        scope_id = as_uuid(event.scope_id)
        fields = {
            "allowed": list(event.allowed) if event.allowed is not None else None,
            "pinned": list(event.pinned),
            "updated_at": stored.recorded_at,
            "version": stored.version,
        }
        if rows.get(ToolScope, scope_id) is None:
            rows.insert(
                ToolScope,
                id=scope_id,
                project_id=as_uuid(stored.project_id),
                goal_id=as_uuid(event.goal_id),
                task_id=as_uuid(event.task_id) if event.task_id else None,
                **fields,
            )
        else:
            rows.update(ToolScope, scope_id, **fields)


def _datetime(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None
