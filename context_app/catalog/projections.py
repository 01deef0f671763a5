"""The catalog's read models, kept from the ``models-<project_id>`` stream."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models

from context_app.catalog.models import (
    CatalogAlias,
    CatalogCard,
    ModelCatalogHead,
    ModelOverlay,
    ModelOverlayChange,
)
from nexum.core.catalog.changes import ModelCatalogReplaced, ModelOverlayCleared, ModelOverlaySet
from nexum.core.ids import CATALOG_WORD_ROW_IDS, as_uuid
from nexum.eventstore.projections import Projection, ReadModelRows, handles
from nexum.eventstore.reading import StoredEvent


def word_row_id(project_id: str | uuid.UUID, word: str) -> uuid.UUID:
    """The primary key of a word's card, alias or overlay row in one project."""
    return uuid.uuid5(CATALOG_WORD_ROW_IDS, f"{project_id}\x00{word}")


class ModelCatalogProjection(Projection):
    models = (ModelCatalogHead, CatalogCard, CatalogAlias, ModelOverlay, ModelOverlayChange)

    @handles(ModelCatalogReplaced)
    def catalog_replaced(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ModelCatalogReplaced = stored.event  # type: ignore[assignment]
        project_id = as_uuid(stored.project_id)
        at = stored.recorded_at
        for word in event.removed_words:
            rows.delete(CatalogCard, word_row_id(project_id, word))
            rows.delete(CatalogAlias, word_row_id(project_id, word))
        for card in event.cards:
            key = word_row_id(project_id, card["word"])
            rows.delete(CatalogAlias, key)  # a word may change from alias to model word
            overrides = card.get("overrides") or {}
            fields = {
                "word": card["word"],
                "model_id": card["model_id"],
                "tier": card["tier"],
                "context_window": card.get("context_window"),
                "max_output_tokens": card.get("max_output_tokens"),
                "capabilities": list(card.get("capabilities") or []),
                "latency_class": card.get("latency_class"),
                "encoding": card["encoding"],
                "preferred_context_tokens": card.get("preferred_context_tokens"),
                "max_tool_count": card.get("max_tool_count"),
                "override_context_tokens": overrides.get("context_tokens"),
                "override_tool_count": overrides.get("tool_count"),
                "safety_margin_tokens": card.get("safety_margin_tokens"),
                "safety_margin_percent": card.get("safety_margin_percent"),
                "updated_at": at,
            }
            _upsert(rows, CatalogCard, key, project_id, fields)
        for kind, table in ((CatalogAlias.ALIAS, event.aliases), (CatalogAlias.TIER, event.tiers)):
            for word, target in table.items():
                key = word_row_id(project_id, word)
                rows.delete(CatalogCard, key)
                fields = {"word": word, "target": target, "kind": kind, "updated_at": at}
                _upsert(rows, CatalogAlias, key, project_id, fields)
        self._advance(stored, rows)

    @handles(ModelOverlaySet)
    def overlay_set(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ModelOverlaySet = stored.event  # type: ignore[assignment]
        project_id = as_uuid(stored.project_id)
        fields = {
            "word": event.word,
            "context_tokens": event.new.get("context_tokens"),
            "auto_compact_tokens": event.new.get("auto_compact_tokens"),
            "enabled": event.new.get("enabled"),
            "updated_at": stored.recorded_at,
            "updated_by": _actor(stored),
        }
        _upsert(rows, ModelOverlay, word_row_id(project_id, event.word), project_id, fields)
        self._record_change(stored, rows, event.word, event.old, event.new)
        self._advance(stored, rows)

    @handles(ModelOverlayCleared)
    def overlay_cleared(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ModelOverlayCleared = stored.event  # type: ignore[assignment]
        project_id = as_uuid(stored.project_id)
        rows.delete(ModelOverlay, word_row_id(project_id, event.word))
        self._record_change(stored, rows, event.word, event.old, None)
        self._advance(stored, rows)

    def _record_change(
        self, stored: StoredEvent, rows: ReadModelRows, word: str, old: object, new: object
    ) -> None:
        rows.insert(
            ModelOverlayChange,
            position=stored.position,
            project_id=as_uuid(stored.project_id),
            word=word,
            old=old,
            new=new,
            actor=_actor(stored),
            recorded_at=stored.recorded_at,
        )

    def _advance(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        project_id = as_uuid(stored.project_id)
        fields = {"version": stored.version, "updated_at": stored.recorded_at}
        if rows.get(ModelCatalogHead, project_id) is None:
            rows.insert(ModelCatalogHead, project_id=project_id, **fields)
        else:
            rows.update(ModelCatalogHead, project_id, **fields)


def _upsert(
    rows: ReadModelRows,
    model: type[models.Model],
    key: uuid.UUID,
    project_id: uuid.UUID,
    fields: dict[str, Any],
) -> None:
    if rows.get(model, key) is None:
        rows.insert(model, id=key, project_id=project_id, **fields)
    else:
        rows.update(model, key, **fields)


def _actor(stored: StoredEvent) -> str:
    return str(stored.metadata.get("actor", "system"))[:200]
