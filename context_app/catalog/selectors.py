"""Reads of the model catalog and its overlays.

Nothing here caches across calls: every ``budget_for`` reads the catalog and the overlays from the read
models at the moment of the question, so an overlay set between two model calls of a running task reaches
the second one (SPEC O2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from context_app.catalog.models import CatalogAlias, CatalogCard, ModelCatalogHead, ModelOverlay
from nexum.core.catalog.budgets import ModelBudget, budget_for_profile
from nexum.core.catalog.cards import BudgetOverrides, ModelCard
from nexum.core.catalog.changes import CatalogDocument, CatalogState
from nexum.core.catalog.overlays import (
    UNKNOWN_MODEL_WORD,
    ContextWindowOverlay,
    ModelCatalog,
    auto_compact_window,
    compaction_enabled,
    overlay_for,
    physical_window_of,
)
from nexum.core.errors import DomainError, NotFound, ValidationFailed

OVERRIDE_MEMBERS = ("context_tokens", "tool_count")


@dataclass(frozen=True)
class ModelChoice:
    """What one model call gets, decided now: the card its word resolves to, the overlay in force for that
    word (``None`` for a pinned card), the budget, whether compaction is on and its trigger window."""

    word: str | None
    card: ModelCard
    overlay: ContextWindowOverlay | None
    budget: ModelBudget
    compaction_enabled: bool
    auto_compact_tokens: int | None
    catalog_version: int


@dataclass(frozen=True)
class WordView:
    """One catalog word as ``GET /api/v1/models`` shows it."""

    word: str
    kind: str  # model | alias | tier
    target: str | None
    model_word: str
    model_id: str
    overlay: ContextWindowOverlay | None
    overlay_in_force: ContextWindowOverlay | None
    window: int | None
    auto_compact_tokens: int | None
    compaction_enabled: bool
    budget: ModelBudget | None
    budget_error: dict[str, str] | None


@dataclass(frozen=True)
class CatalogView:
    version: int
    document: CatalogDocument
    words: tuple[WordView, ...]


def catalog_version(project_id: str) -> int:
    """The version of the project's ``models-<id>`` stream (0 before any catalog or overlay event)."""
    version = ModelCatalogHead.objects.filter(project_id=project_id).values_list("version", flat=True).first()
    return version or 0


def _card(row: CatalogCard) -> ModelCard:
    return ModelCard(
        word=row.word,
        model_id=row.model_id,
        tier=row.tier,  # type: ignore[arg-type]
        context_window=row.context_window,
        max_output_tokens=row.max_output_tokens,
        capabilities=tuple(row.capabilities),
        latency_class=row.latency_class,
        encoding=row.encoding,
        preferred_context_tokens=row.preferred_context_tokens,
        max_tool_count=row.max_tool_count,
        overrides=BudgetOverrides(
            context_tokens=row.override_context_tokens, tool_count=row.override_tool_count
        ),
        safety_margin_tokens=row.safety_margin_tokens,
        safety_margin_percent=row.safety_margin_percent,
    )


def catalog_document_for(project_id: str) -> CatalogDocument:
    """The catalog in force as a document (empty when none was loaded)."""
    cards = tuple(_card(row) for row in CatalogCard.objects.filter(project_id=project_id).order_by("word"))
    aliases: dict[str, str] = {}
    tiers: dict[str, str] = {}
    for word, target, kind in (
        CatalogAlias.objects.filter(project_id=project_id)
        .order_by("word")
        .values_list("word", "target", "kind")
    ):
        (tiers if kind == CatalogAlias.TIER else aliases)[word] = target
    return CatalogDocument(cards=cards, aliases=aliases, tiers=tiers)


def catalog_for(project_id: str) -> ModelCatalog:
    """The project's catalog in force: model words → cards, alias and tier words → the word they name."""
    return catalog_document_for(project_id).catalog


def word_require(*, project_id: str, word: str, field: str) -> None:
    """A word a request names (in the path or the body) names an entry of the project's catalog, as an id
    names an object: one the catalog lacks is 404 ``unknown_model_word`` naming ``field``."""
    if word not in catalog_for(project_id):
        raise _unknown_word(word, field)


def _unknown_word(word: str, field: str) -> NotFound:
    return NotFound(
        f"unknown model word {word!r}; the project's catalog has no such word",
        field=field,
        code=UNKNOWN_MODEL_WORD,
    )


def overlays_for(project_id: str) -> dict[str, ContextWindowOverlay]:
    """Every overlay declared in the project, by word, read now."""
    return {
        row.word: ContextWindowOverlay(
            context_tokens=row.context_tokens,
            auto_compact_tokens=row.auto_compact_tokens,
            enabled=row.enabled,
        )
        for row in ModelOverlay.objects.filter(project_id=project_id).order_by("word")
    }


def catalog_state_for(project_id: str) -> CatalogState:
    return CatalogState(document=catalog_document_for(project_id), overlays=overlays_for(project_id))


def _overrides(value: BudgetOverrides | Mapping[str, Any] | None) -> BudgetOverrides | None:
    if value is None or isinstance(value, BudgetOverrides):
        return value
    if not isinstance(value, Mapping):
        raise ValidationFailed("overrides must be an object", field="overrides")
    unknown = [key for key in value if key not in OVERRIDE_MEMBERS]
    if unknown:
        raise ValidationFailed(
            f"unknown budget override {unknown[0]!r}; allowed: {', '.join(OVERRIDE_MEMBERS)}",
            field=f"overrides.{unknown[0]}",
        )
    try:
        return BudgetOverrides(context_tokens=value.get("context_tokens"), tool_count=value.get("tool_count"))
    except ValidationFailed as error:
        raise ValidationFailed(error.message, field=f"overrides.{error.field}", code=error.code) from error


def budget_for(
    *,
    project_id: str,
    word: str | ModelCard,
    overrides: BudgetOverrides | Mapping[str, Any] | None = None,
    compaction: bool | None = None,
) -> ModelChoice:
    """The live budget for a model call made under ``word`` (SPEC B1-B5, O2-O6), read at this moment.

    ``word`` is a catalog word (alias and tier words included), resolved against the project's catalog with
    the overlay looked up per O5, or a pinned ``ModelCard``, used as declared and never overlaid.
    ``compaction`` is the request's own choice (O6). An unknown word raises ``ValidationFailed``
    (``unknown_model_word``); a card without any window raises ``model_window_unknown``.
    """
    budget_overrides = _overrides(overrides)
    version = catalog_version(project_id)
    if isinstance(word, ModelCard):
        card, overlay, name = word, None, None
    else:
        catalog = catalog_for(project_id)
        card = catalog.resolve(word)
        overlay = overlay_for(overlays_for(project_id), word, catalog)
        name = word
    return ModelChoice(
        word=name,
        card=card,
        overlay=overlay,
        budget=budget_for_profile(card, overlay, overrides=budget_overrides),
        compaction_enabled=compaction_enabled(compaction, overlay),
        auto_compact_tokens=auto_compact_window(card, overlay),
        catalog_version=version,
    )


def requested_budget_for(*, project_id: str, word: str, field: str, **options: Any) -> ModelChoice:
    """``budget_for`` a word a request names: one the catalog lacks is 404 ``unknown_model_word`` naming
    ``field``, as ``word_require`` has it, told from the catalog ``budget_for`` reads anyway (a compile
    reads it once)."""
    try:
        return budget_for(project_id=project_id, word=word, **options)
    except ValidationFailed as error:
        if error.code != UNKNOWN_MODEL_WORD:
            raise
        raise _unknown_word(word, field) from error


def catalog_view(project_id: str) -> CatalogView:
    """Every catalog word with the overlay it declares, the overlay in force for it and its budget now."""
    version = catalog_version(project_id)
    document = catalog_document_for(project_id)
    catalog = document.catalog
    overlays = overlays_for(project_id)
    kinds = {
        **{card.word: ("model", None) for card in document.cards},
        **{word: ("alias", target) for word, target in document.aliases.items()},
        **{word: ("tier", target) for word, target in document.tiers.items()},
    }
    words = []
    for word in catalog.words():
        kind, target = kinds[word]
        card = catalog.resolve(word)
        in_force = overlay_for(overlays, word, catalog)
        budget: ModelBudget | None = None
        budget_error: dict[str, str] | None = None
        try:
            budget = budget_for_profile(card, in_force)
        except DomainError as error:
            budget_error = {"code": error.code, "message": error.message}
        words.append(
            WordView(
                word=word,
                kind=kind,
                target=target,
                model_word=card.word,
                model_id=card.model_id,
                overlay=overlays.get(word),
                overlay_in_force=in_force,
                window=physical_window_of(card, in_force),
                auto_compact_tokens=auto_compact_window(card, in_force),
                compaction_enabled=compaction_enabled(None, in_force),
                budget=budget,
                budget_error=budget_error,
            )
        )
    return CatalogView(version=version, document=document, words=tuple(words))


def word_view(project_id: str, word: str) -> WordView | None:
    return next((view for view in catalog_view(project_id).words if view.word == word), None)
