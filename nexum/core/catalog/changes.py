"""A project's model catalog and its live overlays as an event-sourced aggregate (SPEC B, O1-O7).

One stream per project (``models-<project_id>``) carries both catalog replacements and overlay changes, so
the checks that tie them together (O4: every overlay word is a catalog word; a catalog change may not orphan
one) are guarded by one stream version: of a concurrent overlay set and a catalog change that would orphan
it, exactly one is appended.

The catalog is exchanged as a JSON *document*::

    {"cards": [{"word": "quick", "model_id": "…", "tier": "local", "context_window": 32768, …}, …],
     "aliases": {"local-70b": "local"},      # another name for a word
     "tiers": {"best": "frontier"}}          # a tier word: names another word's model

Aliases and tier words behave the same in lookup (both are stand-in words of O5); the document keeps the
distinction for operators. Rules this module settles where the spec is silent:

* Words are 1-100 characters of letters, digits and ``_ . : @ + -``, starting with a letter, digit or ``_``
  (they appear in URLs). ``constructor`` and ``__proto__`` are ordinary words.
* Token counts (card numbers and overlay members) are at most ``MAX_TOKEN_COUNT`` (2**31 - 1): larger
  numbers are refused, never truncated.
* An overlay that declares no member is refused (``empty_overlay``): clearing is its own command.
* Setting an overlay to the value in force, replacing the catalog with the catalog in force, or clearing an
  overlay that is not set decides no events (idempotent).
* A catalog change that would orphan an overlay word is a conflict with current state (409,
  ``overlay_word_orphaned``), not malformed input: clear the overlay first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nexum.core.catalog.cards import DEFAULT_ENCODING, BudgetOverrides, ModelCard
from nexum.core.catalog.overlays import (
    OVERLAY_MEMBERS,
    UNKNOWN_MODEL_WORD,
    ContextWindowOverlay,
    ModelCatalog,
    assert_overlay_words,
    overlay_value_gate,
)
from nexum.core.errors import Conflict, ValidationFailed
from nexum.core.events import DomainEvent, event_type
from nexum.core.text import is_storable

WORD_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@+\-]{0,99}$")
MAX_TOKEN_COUNT = 2**31 - 1
DOCUMENT_MEMBERS: tuple[str, ...] = ("cards", "aliases", "tiers")
CARD_MEMBERS: tuple[str, ...] = (
    "word",
    "model_id",
    "tier",
    "context_window",
    "max_output_tokens",
    "capabilities",
    "latency_class",
    "encoding",
    "preferred_context_tokens",
    "max_tool_count",
    "overrides",
    "safety_margin_tokens",
    "safety_margin_percent",
)
CARD_COUNT_MEMBERS: tuple[str, ...] = (
    "context_window",
    "max_output_tokens",
    "preferred_context_tokens",
    "max_tool_count",
    "safety_margin_tokens",
)
OVERRIDE_MEMBERS: tuple[str, ...] = ("context_tokens", "tool_count")
OVERLAY_WORD_ORPHANED = "overlay_word_orphaned"


def models_stream(project_id: str) -> str:
    return f"models-{project_id}"


# --- events -------------------------------------------------------------------------------------------------


@event_type("ModelCatalogReplaced")
@dataclass(frozen=True)
class ModelCatalogReplaced(DomainEvent):
    """The project's whole catalog, as a normalized document. ``removed_words`` are the words (model, alias
    or tier) the previous catalog had and this one has not, so read models can drop them by key."""

    cards: tuple[dict[str, Any], ...]
    aliases: dict[str, str]
    tiers: dict[str, str]
    removed_words: tuple[str, ...]


@event_type("ModelOverlaySet")
@dataclass(frozen=True)
class ModelOverlaySet(DomainEvent):
    """An overlay declared on one word: the declared members before (``None``: none) and after."""

    word: str
    old: dict[str, Any] | None
    new: dict[str, Any]


@event_type("ModelOverlayCleared")
@dataclass(frozen=True)
class ModelOverlayCleared(DomainEvent):
    word: str
    old: dict[str, Any]


# --- the catalog document -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogDocument:
    """A validated catalog: cards sorted by word, aliases and tier words (each word → the word it names)."""

    cards: tuple[ModelCard, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    tiers: Mapping[str, str] = field(default_factory=dict)

    @property
    def catalog(self) -> ModelCatalog:
        return ModelCatalog(
            cards={card.word: card for card in self.cards}, aliases={**self.aliases, **self.tiers}
        )

    def words(self) -> frozenset[str]:
        return frozenset({*(card.word for card in self.cards), *self.aliases, *self.tiers})

    def as_data(self) -> dict[str, Any]:
        return {
            "cards": [card_to_data(card) for card in self.cards],
            "aliases": dict(sorted(self.aliases.items())),
            "tiers": dict(sorted(self.tiers.items())),
        }


EMPTY_DOCUMENT = CatalogDocument()


def validate_word(word: object, *, where: str, field_name: str = "word") -> str:
    if not isinstance(word, str) or not WORD_PATTERN.match(word):
        raise ValidationFailed(
            f"{where}: a model word is 1-100 letters, digits or '_.:@+-', starting with a letter, digit or "
            f"'_'; got {word!r}",
            field=field_name,
            details={"where": where},
        )
    return word


def _validate_bound(value: object, *, where: str, field_name: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKEN_COUNT:
        raise ValidationFailed(
            f"{where}: {field_name} must be at most {MAX_TOKEN_COUNT}, got {value!r}",
            field=field_name,
            details={"where": where, "value": repr(value)},
        )


def card_to_data(card: ModelCard) -> dict[str, Any]:
    """Every member of a card, absent ones as ``None`` (the normalized form stored in events)."""
    return {
        "word": card.word,
        "model_id": card.model_id,
        "tier": card.tier,
        "context_window": card.context_window,
        "max_output_tokens": card.max_output_tokens,
        "capabilities": list(card.capabilities),
        "latency_class": card.latency_class,
        "encoding": card.encoding,
        "preferred_context_tokens": card.preferred_context_tokens,
        "max_tool_count": card.max_tool_count,
        "overrides": {
            "context_tokens": card.overrides.context_tokens,
            "tool_count": card.overrides.tool_count,
        },
        "safety_margin_tokens": card.safety_margin_tokens,
        "safety_margin_percent": card.safety_margin_percent,
    }


def card_from_data(value: object, *, where: str, prefix: str = "") -> ModelCard:
    """A card from JSON data, refusing unknown members and wrong types; ``prefix`` is put before the field
    named in errors (``cards[2].``)."""
    if not isinstance(value, Mapping):
        raise ValidationFailed(
            f"{where}: a model card must be an object, got {type(value).__name__}",
            field=prefix.rstrip(".") or "card",
            details={"where": where},
        )
    unknown = [key for key in value if key not in CARD_MEMBERS]
    if unknown:
        raise ValidationFailed(
            f"{where}: unknown model card member {unknown[0]!r}; allowed: {', '.join(CARD_MEMBERS)}",
            field=f"{prefix}{unknown[0]}",
            details={"where": where},
        )
    for required in ("word", "model_id", "tier"):
        if value.get(required) is None:
            raise ValidationFailed(
                f"{where}: a model card needs {required!r}",
                field=f"{prefix}{required}",
                details={"where": where},
            )
    validate_word(value["word"], where=where, field_name=f"{prefix}word")
    for member in CARD_COUNT_MEMBERS:
        _validate_bound(value.get(member), where=where, field_name=f"{prefix}{member}")
    overrides = value.get("overrides")
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, Mapping):
        raise ValidationFailed(
            f"{where}: overrides must be an object with members {', '.join(OVERRIDE_MEMBERS)}",
            field=f"{prefix}overrides",
            details={"where": where},
        )
    unknown = [key for key in overrides if key not in OVERRIDE_MEMBERS]
    if unknown:
        raise ValidationFailed(
            f"{where}: unknown override member {unknown[0]!r}; allowed: {', '.join(OVERRIDE_MEMBERS)}",
            field=f"{prefix}overrides.{unknown[0]}",
            details={"where": where},
        )
    for member in OVERRIDE_MEMBERS:
        _validate_bound(overrides.get(member), where=where, field_name=f"{prefix}overrides.{member}")
    capabilities = value.get("capabilities")
    if capabilities is not None and not isinstance(capabilities, list | tuple):
        raise ValidationFailed(
            f"{where}: capabilities must be a list of strings, got {capabilities!r}",
            field=f"{prefix}capabilities",
            details={"where": where},
        )
    texts = [(member, value.get(member)) for member in ("model_id", "latency_class", "encoding", "tier")]
    texts += [("capabilities", text) for text in capabilities or ()]
    for text_member, text in texts:
        if isinstance(text, str) and (len(text) > 200 or not is_storable(text)):
            raise ValidationFailed(
                f"{where}: {text_member} must be at most 200 characters, without NUL or lone surrogates",
                field=f"{prefix}{text_member}",
                details={"where": where},
            )
    try:
        budget_overrides = BudgetOverrides(
            context_tokens=overrides.get("context_tokens"), tool_count=overrides.get("tool_count")
        )
    except ValidationFailed as error:
        raise _prefixed(error, where, f"{prefix}overrides.") from error
    try:
        card = ModelCard(
            word=value["word"],
            model_id=value["model_id"],
            tier=value["tier"],
            context_window=value.get("context_window"),
            max_output_tokens=value.get("max_output_tokens"),
            capabilities=tuple(capabilities or ()),
            latency_class=value.get("latency_class"),
            encoding=DEFAULT_ENCODING if value.get("encoding") is None else value["encoding"],
            preferred_context_tokens=value.get("preferred_context_tokens"),
            max_tool_count=value.get("max_tool_count"),
            overrides=budget_overrides,
            safety_margin_tokens=value.get("safety_margin_tokens"),
            safety_margin_percent=value.get("safety_margin_percent"),
        )
    except ValidationFailed as error:
        raise _prefixed(error, where, prefix) from error
    for capability in card.capabilities:
        if len(capability) > 100:
            raise ValidationFailed(
                f"{where}: a capability is at most 100 characters",
                field=f"{prefix}capabilities",
                details={"where": where},
            )
    return card


def validate_storable(value: object, *, where: str, root: str) -> None:
    """Refuse NUL and unpaired surrogates anywhere in a JSON value, keys included, before any part of it is
    stored or echoed in an error (a lone surrogate cannot even be written into a JSON response)."""
    stack: list[tuple[object, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str) and not is_storable(item):
            raise ValidationFailed(
                f"{where}: text at {path or root} holds a NUL or an unpaired surrogate",
                field=path or root,
                details={"where": where},
            )
        if isinstance(item, Mapping):
            for key, member in item.items():
                if isinstance(key, str) and not is_storable(key):
                    raise ValidationFailed(
                        f"{where}: a member name in {path or root} holds a NUL or an unpaired surrogate",
                        field=path or root,
                        details={"where": where},
                    )
                stack.append((member, f"{path}.{key}" if path else str(key)))
        elif isinstance(item, list | tuple):
            stack.extend((member, f"{path or root}[{index}]") for index, member in enumerate(item))


def _prefixed(error: ValidationFailed, where: str, prefix: str) -> ValidationFailed:
    return ValidationFailed(
        f"{where}: {error.message}",
        field=f"{prefix}{error.field or 'card'}",
        code=error.code,
        details={"where": where, **error.details},
    )


def _word_table(value: object, *, name: str, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationFailed(
            f"{where}: {name} must be an object mapping a word to the word it names",
            field=name,
            details={"where": where},
        )
    table: dict[str, str] = {}
    for word, target in value.items():
        validate_word(word, where=where, field_name=f"{name}.{word}")
        if not isinstance(target, str) or not target:
            raise ValidationFailed(
                f"{where}: {name} word {word!r} must name a word, got {target!r}",
                field=f"{name}.{word}",
                details={"where": where},
            )
        table[word] = target
    return table


def catalog_document_from_data(value: object, *, where: str) -> CatalogDocument:
    """The value gate for a whole catalog (from the API, the command or a fixture file)."""
    validate_storable(value, where=where, root="catalog")
    if not isinstance(value, Mapping):
        raise ValidationFailed(
            f"{where}: a model catalog must be an object with members {', '.join(DOCUMENT_MEMBERS)}",
            field="catalog",
            details={"where": where},
        )
    unknown = [key for key in value if key not in DOCUMENT_MEMBERS]
    if unknown:
        raise ValidationFailed(
            f"{where}: unknown model catalog member {unknown[0]!r}; allowed: {', '.join(DOCUMENT_MEMBERS)}",
            field=str(unknown[0]),
            details={"where": where},
        )
    raw_cards = value.get("cards")
    if not isinstance(raw_cards, list | tuple):
        raise ValidationFailed(
            f"{where}: cards must be a list of model cards", field="cards", details={"where": where}
        )
    cards: dict[str, ModelCard] = {}
    for index, raw in enumerate(raw_cards):
        card = card_from_data(raw, where=where, prefix=f"cards[{index}].")
        if card.word in cards:
            raise ValidationFailed(
                f"{where}: two cards declare the word {card.word!r}",
                field=f"cards[{index}].word",
                details={"where": where, "word": card.word},
            )
        cards[card.word] = card
    aliases = _word_table(value.get("aliases"), name="aliases", where=where)
    tiers = _word_table(value.get("tiers"), name="tiers", where=where)
    both = sorted(set(aliases) & set(tiers))
    if both:
        raise ValidationFailed(
            f"{where}: {both[0]!r} is both an alias and a tier word",
            field=f"tiers.{both[0]}",
            details={"where": where, "words": both},
        )
    document = CatalogDocument(
        cards=tuple(cards[word] for word in sorted(cards)),
        aliases=dict(sorted(aliases.items())),
        tiers=dict(sorted(tiers.items())),
    )
    try:
        document.catalog  # noqa: B018 - builds the catalog: word clashes, unknown targets, cycles
    except ValidationFailed as error:
        raise ValidationFailed(
            f"{where}: {error.message}",
            field=error.field,
            code=error.code,
            details={"where": where, **error.details},
        ) from error
    return document


def document_from_event(event: ModelCatalogReplaced) -> CatalogDocument:
    return catalog_document_from_data(
        {"cards": list(event.cards), "aliases": event.aliases, "tiers": event.tiers}, where="event log"
    )


# --- decide -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogState:
    """What the decisions need: the catalog in force and the overlays declared on its words."""

    document: CatalogDocument = EMPTY_DOCUMENT
    overlays: Mapping[str, ContextWindowOverlay] = field(default_factory=dict)


def decide_catalog_replace(
    state: CatalogState, document: CatalogDocument, *, where: str
) -> list[DomainEvent]:
    """Replace the catalog, unless an overlay word would be orphaned (O4). Same catalog: no events."""
    try:
        assert_overlay_words(state.overlays, document.catalog, where)
    except ValidationFailed as error:
        orphaned = error.details.get("words", [])
        raise Conflict(
            f"{where}: the new catalog drops word(s) {', '.join(map(repr, orphaned))} that carry an overlay; "
            f"clear the overlay first (DELETE /api/v1/models/{{word}}/overlay)",
            field="word",
            code=OVERLAY_WORD_ORPHANED,
            details={"where": where, "words": orphaned},
        ) from error
    if document.as_data() == state.document.as_data():
        return []
    data = document.as_data()
    return [
        ModelCatalogReplaced(
            cards=tuple(data["cards"]),
            aliases=data["aliases"],
            tiers=data["tiers"],
            removed_words=tuple(sorted(state.document.words() - document.words())),
        )
    ]


def _validate_known_word(state: CatalogState, word: object, where: str) -> str:
    if not isinstance(word, str) or word not in state.document.catalog:
        words = ", ".join(state.document.catalog.words()) or "(none)"
        raise ValidationFailed(
            f"{where}: unknown model word {word!r}; catalog words: {words}",
            field="word",
            code=UNKNOWN_MODEL_WORD,
            details={"where": where, "word": repr(word)},
        )
    return word


def decide_overlay_set(state: CatalogState, word: str, value: object, *, where: str) -> list[DomainEvent]:
    """Declare ``value`` (the overlay members) on ``word``: the word must be a catalog word, the value must
    pass the value gate (O4). The same value again: no events."""
    _validate_known_word(state, word, where)
    validate_storable(value, where=where, root="overlay")
    if value is None:
        raise ValidationFailed(
            f"{where}: an overlay must be an object; to clear one, delete it",
            field="overlay",
            details={"where": where},
        )
    overlay = overlay_value_gate(value, where)
    assert overlay is not None
    for member in OVERLAY_MEMBERS:
        _validate_bound(getattr(overlay, member), where=where, field_name=member)
    if not overlay.declares_anything:
        raise ValidationFailed(
            f"{where}: the overlay declares none of {', '.join(OVERLAY_MEMBERS)}; to clear it, delete it",
            field="overlay",
            code="empty_overlay",
            details={"where": where},
        )
    old = state.overlays.get(word)
    if old is not None and old.as_dict() == overlay.as_dict():
        return []
    return [ModelOverlaySet(word=word, old=old.as_dict() if old is not None else None, new=overlay.as_dict())]


def decide_overlay_clear(state: CatalogState, word: str, *, where: str) -> list[DomainEvent]:
    """Clear ``word``'s overlay. An unknown word is refused; a word with no overlay: no events."""
    _validate_known_word(state, word, where)
    old = state.overlays.get(word)
    if old is None:
        return []
    return [ModelOverlayCleared(word=word, old=old.as_dict())]


def overlay_from_data(data: Mapping[str, Any] | None) -> ContextWindowOverlay | None:
    return None if data is None else overlay_value_gate(dict(data), "event log")
