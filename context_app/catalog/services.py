"""Writes to a project's model catalog and overlays. Every change is an event on ``models-<project_id>``;
read models follow by projection. ``where`` names the door a value came through (the API route, the admin,
the command) in every refusal (SPEC O4).

A new project is set up here (``project_setup``), the lowest layer that knows both projects and catalogs:
created with the default catalog, so its first compile finds its model words."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from context_app.catalog import selectors
from nexum.adapters.tokenization import UnknownEncoding, default_registry
from nexum.core.catalog.changes import (
    CatalogDocument,
    catalog_document_from_data,
    decide_catalog_replace,
    decide_overlay_clear,
    decide_overlay_set,
    models_stream,
)
from nexum.core.catalog.overlays import ContextWindowOverlay
from nexum.core.errors import ConcurrencyError, NotFound
from nexum.core.events import DomainEvent
from nexum.eventstore import store
from tasks_app.models import Project
from tasks_app.services.projects import project_create

DEFAULT_CATALOG = Path(__file__).resolve().parent / "fixtures" / "default_model_catalog.json"


@dataclass(frozen=True)
class CatalogChange:
    document: CatalogDocument
    changed: bool
    version: int


@dataclass(frozen=True)
class OverlayChange:
    word: str
    old: ContextWindowOverlay | None
    new: ContextWindowOverlay | None
    changed: bool
    version: int


def model_catalog_replace(
    *,
    project_id: str,
    catalog: object,
    actor: str,
    where: str = "model catalog",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> CatalogChange:
    """Replace the project's cards, aliases and tier words with ``catalog`` (a catalog document).

    Refused, with nothing written: a malformed document (400), a card naming an encoding the tokenizer
    registry cannot load (400 ``unknown_encoding``), a catalog that would orphan an overlay word (409
    ``overlay_word_orphaned``). The catalog already in force: nothing written, ``changed`` false.
    """
    _validate_project(project_id)
    document = catalog_document_from_data(catalog, where=where)
    _validate_encodings(document, catalog, where)
    with transaction.atomic():
        version = _current_version(project_id, expected_version)
        state = selectors.catalog_state_for(project_id)
        events = decide_catalog_replace(state, document, where=where)
        version = _append(project_id, events, version, actor, idempotency_key)
    return CatalogChange(document=document, changed=bool(events), version=version)


def project_setup(
    *, slug: str, name: str, description: str = "", actor: str
) -> tuple[Project, CatalogChange]:
    """Create a project (``tasks_app.services.projects.project_create``: a taken or malformed slug, a blank
    name are refused) and load the default model catalog into it, in one transaction: both events or
    neither."""
    with transaction.atomic():
        project = project_create(slug=slug, name=name, description=description, actor=actor)
        catalog = model_catalog_replace(
            project_id=str(project.id),
            catalog=json.loads(DEFAULT_CATALOG.read_text(encoding="utf-8")),
            actor=actor,
            where=f"the default catalog ({DEFAULT_CATALOG.name})",
        )
    return project, catalog


def model_overlay_set(
    *,
    project_id: str,
    word: str,
    overlay: object,
    actor: str,
    where: str = "model overlay",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> OverlayChange:
    """Declare an overlay (its members: ``context_tokens``, ``auto_compact_tokens``, ``enabled``) on a
    catalog word. Unknown words and malformed values are refused (400) naming ``where`` and the member at
    fault; nothing is written. The value in force again: nothing written, ``changed`` false."""
    _validate_project(project_id)
    with transaction.atomic():
        version = _current_version(project_id, expected_version)
        state = selectors.catalog_state_for(project_id)
        events = decide_overlay_set(state, word, overlay, where=where)
        version = _append(project_id, events, version, actor, idempotency_key)
    new = selectors.overlays_for(project_id).get(word)
    return OverlayChange(word, state.overlays.get(word), new, bool(events), version)


def model_overlay_clear(
    *,
    project_id: str,
    word: str,
    actor: str,
    where: str = "model overlay",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> OverlayChange:
    """Clear a word's overlay, so the card's own numbers apply again. Unknown words are refused (400); a
    word without an overlay: nothing written, ``changed`` false."""
    _validate_project(project_id)
    with transaction.atomic():
        version = _current_version(project_id, expected_version)
        state = selectors.catalog_state_for(project_id)
        events = decide_overlay_clear(state, word, where=where)
        version = _append(project_id, events, version, actor, idempotency_key)
    return OverlayChange(word, state.overlays.get(word), None, bool(events), version)


def _validate_project(project_id: str) -> None:
    try:
        key = uuid.UUID(str(project_id))
    except ValueError:
        raise NotFound(f"no project {project_id}", field="project_id") from None
    if not Project.objects.filter(id=key).exists():
        raise NotFound(f"no project {project_id}", field="project_id")


def _validate_encodings(document: CatalogDocument, raw: object, where: str) -> None:
    """Every card's encoding must load now, at catalog load, not at the first compile (SPEC §5)."""
    raw_cards = raw.get("cards") if isinstance(raw, Mapping) else None
    index = {card.get("word"): i for i, card in enumerate(raw_cards or []) if isinstance(card, Mapping)}
    registry = default_registry()
    for card in document.cards:
        try:
            registry.check(card.encoding)
        except UnknownEncoding as error:
            raise UnknownEncoding(
                f"{where}: model card {card.word!r}: {error.message}",
                field=f"cards[{index.get(card.word, 0)}].encoding",
                details={"where": where, "word": card.word, "encoding": card.encoding},
            ) from error


def _current_version(project_id: str, expected_version: int | None) -> int:
    current = selectors.catalog_version(project_id)
    if expected_version is not None and expected_version != current:
        raise ConcurrencyError(
            f"the model catalog of project {project_id} is at version {current}, not {expected_version}",
            field="expected_version",
            details={"current_version": current, "expected_version": expected_version},
        )
    return current


def _append(
    project_id: str, events: list[DomainEvent], version: int, actor: str, idempotency_key: str | None
) -> int:
    if not events:
        return version
    result = store.append(
        stream_id=models_stream(str(project_id)),
        events=events,
        expected_version=version,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=str(project_id),
    )
    return result.stream_version
