"""Per-word context-window overlays and the model catalog they are keyed by (SPEC O1-O6).

An overlay is a deployment *setting*, not part of the model card: it is read live at every compile (O2),
it can only lower a model's window (O3), and it never carries routing. It is keyed by catalog word; a call
pinned to a ``ModelCard`` object has no word and therefore no overlay (O5).

Rules this module settles where the spec is silent:

* A member given as ``None`` (JSON ``null``) means "not declared", exactly like an absent member.
* An overlay entry with no member set declares nothing, so lookup moves on to the stand-in words (O5).
* Among stand-in words the resolution chain of the call's word comes first (nearest hop first, ending at the
  model word), then every other word naming the same card, sorted. The first one that declares something wins
  whole; overlays are never merged member by member.
* "The same model" means the same catalog card (the word the chain ends at), not the same ``model_id``: two
  cards may route to one id with different geometry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nexum.core.catalog.cards import ModelCard, is_int
from nexum.core.errors import ValidationFailed

OVERLAY_MEMBERS: tuple[str, ...] = ("context_tokens", "auto_compact_tokens", "enabled")
UNKNOWN_MODEL_WORD = "unknown_model_word"


def _validate_member(member: str, value: object, where: str) -> None:
    if value is None:
        return
    if member == "enabled":
        if not isinstance(value, bool):
            raise ValidationFailed(
                f"{where}: context window overlay member 'enabled' must be true or false, got {value!r}",
                field=member,
                details={"where": where, "value": repr(value)},
            )
        return
    if not is_int(value) or value <= 0:
        raise ValidationFailed(
            f"{where}: context window overlay member {member!r} must be a positive integer, got {value!r}",
            field=member,
            details={"where": where, "value": repr(value)},
        )


@dataclass(frozen=True, kw_only=True)
class ContextWindowOverlay:
    """One word's overlay (O1). Every member is optional; ``None`` means "whatever the model card says".

    ``context_tokens`` lowers the physical window; ``auto_compact_tokens`` is the compaction trigger window
    (clamped to the physical window); ``enabled`` is the deployment's default for compaction (O6).
    """

    context_tokens: int | None = None
    auto_compact_tokens: int | None = None
    enabled: bool | None = None

    def __post_init__(self) -> None:
        for member in OVERLAY_MEMBERS:
            _validate_member(member, getattr(self, member), "ContextWindowOverlay")

    @property
    def declares_anything(self) -> bool:
        return any(getattr(self, member) is not None for member in OVERLAY_MEMBERS)

    def as_dict(self) -> dict[str, int | bool]:
        """The declared members only, for storage and events."""
        declared: dict[str, int | bool] = {}
        for member in OVERLAY_MEMBERS:
            value = getattr(self, member)
            if value is not None:
                declared[member] = value
        return declared


def overlay_value_gate(value: object, where: str) -> ContextWindowOverlay | None:
    """The value gate (O4): turn an operator-supplied value into an overlay, or refuse it loudly.

    ``None`` (the seat cleared) passes through. A mapping is checked member by member: unknown members,
    non-positive or non-integer window numbers and a non-boolean ``enabled`` raise ``ValidationFailed`` whose
    message names ``where`` and whose ``field`` names the member at fault. Nothing is ever repaired.
    """
    if value is None:
        return None
    if isinstance(value, ContextWindowOverlay):
        return value
    if not isinstance(value, Mapping):
        raise ValidationFailed(
            f"{where}: a context window overlay must be an object with members {', '.join(OVERLAY_MEMBERS)}; "
            f"got {type(value).__name__}",
            field="overlay",
            details={"where": where},
        )
    unknown = sorted(repr(key) for key in value if key not in OVERLAY_MEMBERS)
    if unknown:
        first = next(key for key in value if key not in OVERLAY_MEMBERS)
        raise ValidationFailed(
            f"{where}: unknown context window overlay member(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(OVERLAY_MEMBERS)}",
            field=str(first),
            details={"where": where, "unknown_members": unknown},
        )
    for member in OVERLAY_MEMBERS:
        _validate_member(member, value.get(member), where)
    return ContextWindowOverlay(
        context_tokens=value.get("context_tokens"),
        auto_compact_tokens=value.get("auto_compact_tokens"),
        enabled=value.get("enabled"),
    )


def overlay_settings_gate(value: object, where: str) -> dict[str, ContextWindowOverlay]:
    """The value gate for a whole table (word → overlay). ``None`` is the empty table.

    Word checks against the catalog are separate (:func:`assert_overlay_words`), since they need the catalog.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationFailed(
            f"{where}: context window overlays must be an object keyed by model word; "
            f"got {type(value).__name__}",
            field="overlays",
            details={"where": where},
        )
    table: dict[str, ContextWindowOverlay] = {}
    for word in sorted(value, key=repr):
        if not isinstance(word, str) or not word:
            raise ValidationFailed(
                f"{where}: overlay keys must be non-empty model words; got {word!r}",
                field="word",
                details={"where": where},
            )
        overlay = overlay_value_gate(value[word], f"{where} [{word}]")
        if overlay is not None:
            table[word] = overlay
    return table


@dataclass(frozen=True)
class ModelCatalog:
    """Model words → cards, plus alias and tier words → the word they name (chains allowed, cycles refused).

    A word is either a model word (a key of ``cards``) or an alias word (a key of ``aliases``), never both.
    Built from plain mappings; stored read-only.
    """

    cards: Mapping[str, ModelCard]
    aliases: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cards = {word: self.cards[word] for word in sorted(self.cards)}
        aliases = {word: self.aliases[word] for word in sorted(self.aliases)}
        for word, card in cards.items():
            if card.word != word:
                raise ValidationFailed(
                    f"model catalog: the card under {word!r} declares the word {card.word!r}",
                    field="cards",
                    details={"word": word},
                )
        clashes = sorted(set(cards) & set(aliases))
        if clashes:
            raise ValidationFailed(
                f"model catalog: {', '.join(map(repr, clashes))} is both a model word and an alias",
                field="aliases",
                details={"words": clashes},
            )
        for alias, target in aliases.items():
            if target not in cards and target not in aliases:
                raise ValidationFailed(
                    f"model catalog: alias {alias!r} names unknown word {target!r}",
                    field="aliases",
                    code=UNKNOWN_MODEL_WORD,
                    details={"word": alias, "target": target},
                )
        object.__setattr__(self, "cards", MappingProxyType(cards))
        object.__setattr__(self, "aliases", MappingProxyType(aliases))
        for alias in aliases:
            self.chain(alias)  # refuses cycles at construction

    def chain(self, word: str) -> tuple[str, ...]:
        """The words from ``word`` to its model word, both included (``("best", "frontier", "gpt-x")``)."""
        path = [word]
        seen = {word}
        current = word
        while current not in self.cards:
            if current not in self.aliases:
                raise ValidationFailed(
                    f"unknown model word {word!r}",
                    field="word",
                    code=UNKNOWN_MODEL_WORD,
                    details={"word": word},
                )
            current = self.aliases[current]
            if current in seen:
                raise ValidationFailed(
                    f"model catalog: alias cycle {' -> '.join([*path, current])}",
                    field="aliases",
                    code="alias_cycle",
                    details={"cycle": [*path, current]},
                )
            seen.add(current)
            path.append(current)
        return tuple(path)

    def model_word(self, word: str) -> str:
        """The model word ``word`` ends at (itself for a model word)."""
        return self.chain(word)[-1]

    def resolve(self, word: str) -> ModelCard:
        """The card a word names. Unknown words raise ``ValidationFailed`` (code ``unknown_model_word``)."""
        return self.cards[self.model_word(word)]

    def words(self) -> tuple[str, ...]:
        """Every catalog word (model words, aliases and tier words), sorted."""
        return tuple(sorted({*self.cards, *self.aliases}))

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and (word in self.cards or word in self.aliases)

    def stand_in_words(self, word: str) -> tuple[str, ...]:
        """The other words that name the same card as ``word``, in lookup order (see module docstring).

        First the hops of ``word``'s own chain (nearest first, ending at the model word), then every other
        alias or tier word ending at the same model word, sorted. ``word`` itself is never included.
        """
        chain = self.chain(word)
        model_word = chain[-1]
        rest = sorted(
            alias for alias in self.aliases if alias not in chain and self.model_word(alias) == model_word
        )
        return (*chain[1:], *rest)


def physical_window_of(card: ModelCard, overlay: ContextWindowOverlay | None) -> int | None:
    """O3: ``min(card window, overlay context_tokens)``; an overlay lowers freely and never raises.

    A card without a window takes the overlay's number; with neither there is no window (``None``).
    Never raises.
    """
    declared = overlay.context_tokens if overlay is not None else None
    if card.context_window is None:
        return declared
    if declared is None:
        return card.context_window
    return min(card.context_window, declared)


def auto_compact_window(card: ModelCard, overlay: ContextWindowOverlay | None) -> int | None:
    """The compaction trigger window: the overlay's ``auto_compact_tokens`` clamped to the physical window.

    Without a declared trigger it is the physical window itself; with no window at all it is the declared
    trigger (nothing to clamp against) or ``None``.
    """
    window = physical_window_of(card, overlay)
    declared = overlay.auto_compact_tokens if overlay is not None else None
    if declared is None:
        return window
    if window is None:
        return declared
    return min(declared, window)


def assert_overlay_words(words: Iterable[str], catalog: ModelCatalog, where: str) -> None:
    """O4: every overlay word must be a catalog word (model word, alias or tier word).

    Call it when an overlay is set and before a catalog change is applied (with the catalog the change would
    leave in force), so a change that would orphan a declared word is refused too. Every unknown word is
    reported at once, sorted.
    """
    unknown = sorted({word for word in words if word not in catalog})
    if unknown:
        raise ValidationFailed(
            f"{where}: overlay for unknown model word(s) {', '.join(map(repr, unknown))}; "
            f"catalog words: {', '.join(catalog.words()) or '(none)'}",
            field="word",
            code=UNKNOWN_MODEL_WORD,
            details={"where": where, "words": unknown},
        )


def overlay_for(
    settings: Mapping[str, ContextWindowOverlay] | None,
    ref: str | ModelCard | None,
    catalog: ModelCatalog | None = None,
) -> ContextWindowOverlay | None:
    """O5: the overlay in force for a call made under ``ref``, read at the moment of the question.

    The call's own word first; when it declares nothing, the words it stands in for that name the same card
    (:meth:`ModelCatalog.stand_in_words`). A pinned ``ModelCard`` (or no ref) has no word and no overlay. Keys
    are looked up by plain dict membership, so ``constructor`` or ``__class__`` are ordinary words. A word the
    catalog does not know gets only its own entry; this function never raises.
    """
    if not settings or not isinstance(ref, str):
        return None
    own = settings.get(ref)
    if own is not None and own.declares_anything:
        return own
    if catalog is None or ref not in catalog:
        return None
    for word in catalog.stand_in_words(ref):
        overlay = settings.get(word)
        if overlay is not None and overlay.declares_anything:
            return overlay
    return None


def compaction_enabled(request_enabled: bool | None, overlay: ContextWindowOverlay | None) -> bool:
    """O6: the request's own value wins; else the overlay's ``enabled``; else compaction is on."""
    if request_enabled is not None:
        return request_enabled
    if overlay is not None and overlay.enabled is not None:
        return overlay.enabled
    return True
