"""Context-window overlays and the model catalog (SPEC O1-O6). No database, no framework."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexum.core.catalog.cards import ModelCard
from nexum.core.catalog.overlays import (
    ContextWindowOverlay,
    ModelCatalog,
    assert_overlay_words,
    auto_compact_window,
    compaction_enabled,
    overlay_for,
    overlay_settings_gate,
    overlay_value_gate,
    physical_window_of,
)
from nexum.core.errors import ValidationFailed


def card(word: str, *, window: int | None = 100_000, model_id: str | None = None, **fields: Any) -> ModelCard:
    return ModelCard(
        word=word, model_id=model_id or f"vendor/{word}", tier="local", context_window=window, **fields
    )


@pytest.fixture
def catalog() -> ModelCatalog:
    """Two models; tier words and aliases, one a chain (best → frontier → gpt-x)."""
    return ModelCatalog(
        cards={"gpt-x": card("gpt-x", window=200_000), "local-70b": card("local-70b", window=32_000)},
        aliases={
            "frontier": "gpt-x",
            "best": "frontier",
            "opus": "gpt-x",
            "standard": "local-70b",
            "l70": "local-70b",
        },
    )


Overlay = ContextWindowOverlay


# --- physical window and trigger window (O3) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "overlay", "expected"),
    [
        (100_000, None, 100_000),
        (100_000, Overlay(), 100_000),
        (100_000, Overlay(context_tokens=20_000), 20_000),  # lowers freely
        (100_000, Overlay(context_tokens=500_000), 100_000),  # never raises
        (100_000, Overlay(context_tokens=100_000), 100_000),
        (None, Overlay(context_tokens=20_000), 20_000),  # a card without a window takes the overlay's number
        (None, Overlay(auto_compact_tokens=5_000), None),
        (None, None, None),  # never raises
    ],
)
def test_physical_window_of(window: int | None, overlay: Overlay | None, expected: int | None) -> None:
    assert physical_window_of(card("m", window=window), overlay) == expected


@pytest.mark.parametrize(
    ("window", "overlay", "expected"),
    [
        (100_000, None, 100_000),
        (100_000, Overlay(auto_compact_tokens=30_000), 30_000),
        (100_000, Overlay(auto_compact_tokens=300_000), 100_000),  # clamped to the card window
        (
            100_000,
            Overlay(context_tokens=20_000, auto_compact_tokens=30_000),
            20_000,
        ),  # ... and to the overlay's
        (100_000, Overlay(context_tokens=20_000), 20_000),
        (None, Overlay(auto_compact_tokens=5_000), 5_000),  # nothing to clamp against
        (None, Overlay(context_tokens=8_000, auto_compact_tokens=50_000), 8_000),
        (None, None, None),
    ],
)
def test_auto_compact_window(window: int | None, overlay: Overlay | None, expected: int | None) -> None:
    assert auto_compact_window(card("m", window=window), overlay) == expected


@given(
    window=st.none() | st.integers(min_value=1, max_value=10**7),
    declared=st.none() | st.integers(min_value=1, max_value=10**7),
    trigger=st.none() | st.integers(min_value=1, max_value=10**7),
)
def test_an_overlay_never_raises_the_window(
    window: int | None, declared: int | None, trigger: int | None
) -> None:
    model = card("m", window=window)
    overlay = Overlay(context_tokens=declared, auto_compact_tokens=trigger)
    physical = physical_window_of(model, overlay)
    compact = auto_compact_window(model, overlay)
    if window is not None:
        assert physical is not None and physical <= window
    if declared is not None:
        assert physical is not None and physical <= declared
    if physical is not None:
        assert compact is not None and compact <= physical


# --- the value gate (O4) -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"context_tokens": 0}, "context_tokens"),
        ({"context_tokens": -5}, "context_tokens"),
        ({"context_tokens": 3.5}, "context_tokens"),
        ({"context_tokens": 8000.0}, "context_tokens"),
        ({"context_tokens": "8k"}, "context_tokens"),
        ({"context_tokens": True}, "context_tokens"),
        ({"auto_compact_tokens": 0}, "auto_compact_tokens"),
        ({"auto_compact_tokens": "4000"}, "auto_compact_tokens"),
        ({"auto_compact_tokens": False}, "auto_compact_tokens"),
        ({"enabled": "yes"}, "enabled"),
        ({"enabled": 1}, "enabled"),
        ({"context_tokens": 8_000, "contextTokens": 8_000}, "contextTokens"),
        ({"model_id": "other"}, "model_id"),
        ({"endpoint": "https://example.invalid"}, "endpoint"),
    ],
)
def test_value_gate_refuses_malformed_overlays_naming_field_and_where(
    value: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        overlay_value_gate(value, "PUT /models/quick/overlay")
    assert caught.value.field == field
    assert "PUT /models/quick/overlay" in caught.value.message
    assert field in caught.value.message


@pytest.mark.parametrize("value", [8_000, "context_tokens=8000", [("context_tokens", 8_000)], 3.5])
def test_value_gate_refuses_a_non_mapping(value: object) -> None:
    with pytest.raises(ValidationFailed) as caught:
        overlay_value_gate(value, "admin")
    assert caught.value.field == "overlay"
    assert "admin" in caught.value.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),  # the seat cleared
        ({}, Overlay()),
        ({"context_tokens": 8_000}, Overlay(context_tokens=8_000)),
        ({"context_tokens": None, "enabled": False}, Overlay(enabled=False)),  # null means "not declared"
        (
            {"context_tokens": 8_000, "auto_compact_tokens": 6_000, "enabled": True},
            Overlay(context_tokens=8_000, auto_compact_tokens=6_000, enabled=True),
        ),
        (Overlay(context_tokens=1), Overlay(context_tokens=1)),
    ],
)
def test_value_gate_admits_well_formed_overlays(value: object, expected: Overlay | None) -> None:
    assert overlay_value_gate(value, "test") == expected


def test_overlay_constructor_applies_the_same_checks() -> None:
    with pytest.raises(ValidationFailed) as caught:
        Overlay(context_tokens=0)
    assert caught.value.field == "context_tokens"
    with pytest.raises(ValidationFailed) as caught:
        Overlay(enabled="yes")  # type: ignore[arg-type]
    assert caught.value.field == "enabled"


def test_settings_gate_checks_every_word_and_names_it() -> None:
    assert overlay_settings_gate(None, "boot") == {}
    table = overlay_settings_gate({"quick": {"context_tokens": 4_000}, "frontier": {}}, "boot")
    assert table == {"frontier": Overlay(), "quick": Overlay(context_tokens=4_000)}
    with pytest.raises(ValidationFailed) as caught:
        overlay_settings_gate({"quick": {"context_tokens": 4_000}, "frontier": {"enabled": "no"}}, "boot")
    assert caught.value.field == "enabled"
    assert "boot" in caught.value.message and "frontier" in caught.value.message
    with pytest.raises(ValidationFailed):
        overlay_settings_gate([("quick", {})], "boot")
    with pytest.raises(ValidationFailed):
        overlay_settings_gate({"": {}}, "boot")


def test_overlay_as_dict_lists_declared_members_only() -> None:
    assert Overlay(context_tokens=8_000, enabled=False).as_dict() == {
        "context_tokens": 8_000,
        "enabled": False,
    }
    assert Overlay().as_dict() == {}


# --- overlay words must be catalog words (O4) --------------------------------------------------------------


def test_overlay_words_accept_model_tier_and_alias_words(catalog: ModelCatalog) -> None:
    assert_overlay_words(["gpt-x", "frontier", "best", "l70"], catalog, "PUT")


def test_overlay_words_refuse_unknown_words_all_at_once(catalog: ModelCatalog) -> None:
    with pytest.raises(ValidationFailed) as caught:
        assert_overlay_words(["gpt-x", "gtp-x", "constructor"], catalog, "PUT /models/gtp-x/overlay")
    assert caught.value.code == "unknown_model_word"
    assert caught.value.details["words"] == ["constructor", "gtp-x"]
    assert "PUT /models/gtp-x/overlay" in caught.value.message


def test_a_catalog_change_that_orphans_a_word_is_refused(catalog: ModelCatalog) -> None:
    settings = {"l70": Overlay(context_tokens=8_000)}
    shrunk = ModelCatalog(cards=dict(catalog.cards), aliases={"frontier": "gpt-x"})
    with pytest.raises(ValidationFailed) as caught:
        assert_overlay_words(settings, shrunk, "catalog change")
    assert caught.value.code == "unknown_model_word"
    assert caught.value.details["words"] == ["l70"]


# --- lookup (O5) --------------------------------------------------------------------------------------------


def test_own_word_first(catalog: ModelCatalog) -> None:
    own, tier = Overlay(context_tokens=10_000), Overlay(context_tokens=20_000)
    assert overlay_for({"gpt-x": own, "frontier": tier}, "gpt-x", catalog) is own
    assert overlay_for({"gpt-x": own, "frontier": tier}, "frontier", catalog) is tier


def test_alias_naming_the_same_model_applies(catalog: ModelCatalog) -> None:
    tier = Overlay(context_tokens=20_000)
    assert overlay_for({"frontier": tier}, "gpt-x", catalog) is tier
    assert overlay_for({"frontier": tier}, "best", catalog) is tier  # via the chain best → frontier
    assert overlay_for({"gpt-x": tier}, "opus", catalog) is tier  # the model word behind an alias


def test_alias_naming_another_model_does_not_apply(catalog: ModelCatalog) -> None:
    settings = {"standard": Overlay(context_tokens=8_000), "l70": Overlay(context_tokens=9_000)}
    assert overlay_for(settings, "gpt-x", catalog) is None
    assert overlay_for(settings, "frontier", catalog) is None
    assert overlay_for(settings, "best", catalog) is None


def test_stand_ins_are_read_chain_first_then_sorted(catalog: ModelCatalog) -> None:
    assert catalog.stand_in_words("best") == ("frontier", "gpt-x", "opus")
    assert catalog.stand_in_words("gpt-x") == ("best", "frontier", "opus")
    assert catalog.stand_in_words("local-70b") == ("l70", "standard")
    settings = {"opus": Overlay(context_tokens=1_000), "gpt-x": Overlay(context_tokens=2_000)}
    # best → frontier → gpt-x: the model word on the chain beats a sibling alias.
    assert overlay_for(settings, "best", catalog) == Overlay(context_tokens=2_000)
    # A sibling-only match: sorted order decides among siblings.
    siblings = {"opus": Overlay(context_tokens=1_000), "frontier": Overlay(context_tokens=3_000)}
    assert overlay_for(siblings, "gpt-x", catalog) == Overlay(context_tokens=3_000)


def test_an_empty_entry_declares_nothing_and_falls_through(catalog: ModelCatalog) -> None:
    settings = {"gpt-x": Overlay(), "frontier": Overlay(context_tokens=20_000)}
    assert overlay_for(settings, "gpt-x", catalog) == Overlay(context_tokens=20_000)
    assert overlay_for({"gpt-x": Overlay()}, "gpt-x", catalog) is None


def test_a_pinned_model_card_has_no_overlay(catalog: ModelCatalog) -> None:
    pinned = catalog.resolve("gpt-x")
    settings = {"gpt-x": Overlay(context_tokens=1_000), "frontier": Overlay(context_tokens=2_000)}
    assert overlay_for(settings, pinned, catalog) is None
    assert overlay_for(settings, None, catalog) is None


def test_no_settings_or_no_catalog(catalog: ModelCatalog) -> None:
    assert overlay_for(None, "gpt-x", catalog) is None
    assert overlay_for({}, "gpt-x", catalog) is None
    own = Overlay(context_tokens=1_000)
    assert overlay_for({"gpt-x": own}, "gpt-x") is own
    assert overlay_for({"frontier": own}, "gpt-x") is None  # stand-ins need the catalog
    assert overlay_for({"frontier": own}, "unknown-word", catalog) is None  # never raises


@pytest.mark.parametrize("word", ["constructor", "__class__", "__proto__", "toString", "__dict__", "get"])
def test_magic_looking_words_are_ordinary_keys(word: str) -> None:
    catalog = ModelCatalog(cards={"m": card("m")}, aliases={word: "m"})
    assert overlay_for({}, word, catalog) is None
    assert overlay_for({"other": Overlay(context_tokens=5)}, word, catalog) is None
    declared = Overlay(context_tokens=5_000)
    assert overlay_for({word: declared}, word, catalog) is declared
    assert overlay_for({word: declared}, "m", catalog) is declared  # as a stand-in too
    assert catalog.resolve(word).word == "m"
    assert_overlay_words([word], catalog, "PUT")
    with pytest.raises(ValidationFailed):
        assert_overlay_words([word], ModelCatalog(cards={"m": card("m")}), "PUT")


def test_magic_looking_model_words_are_ordinary_keys() -> None:
    catalog = ModelCatalog(cards={"__class__": card("__class__"), "constructor": card("constructor")})
    assert overlay_for({"constructor": Overlay(enabled=False)}, "__class__", catalog) is None
    assert overlay_for({"__class__": Overlay(enabled=False)}, "__class__", catalog) == Overlay(enabled=False)


def test_same_model_id_under_two_cards_is_not_the_same_model() -> None:
    catalog = ModelCatalog(
        cards={"a": card("a", model_id="vendor/x"), "b": card("b", model_id="vendor/x", window=8_000)}
    )
    assert overlay_for({"b": Overlay(context_tokens=4_000)}, "a", catalog) is None


# --- the catalog --------------------------------------------------------------------------------------------


def test_catalog_resolves_words_and_aliases(catalog: ModelCatalog) -> None:
    assert catalog.resolve("best").word == "gpt-x"
    assert catalog.resolve("gpt-x").word == "gpt-x"
    assert catalog.chain("best") == ("best", "frontier", "gpt-x")
    assert catalog.model_word("standard") == "local-70b"
    assert catalog.words() == ("best", "frontier", "gpt-x", "l70", "local-70b", "opus", "standard")
    assert "opus" in catalog and "nope" not in catalog and 3 not in catalog


def test_catalog_refuses_an_unknown_word(catalog: ModelCatalog) -> None:
    with pytest.raises(ValidationFailed) as caught:
        catalog.resolve("gtp-x")
    assert (caught.value.code, caught.value.field) == ("unknown_model_word", "word")
    with pytest.raises(ValidationFailed):
        catalog.stand_in_words("gtp-x")


def test_catalog_refuses_alias_cycles() -> None:
    with pytest.raises(ValidationFailed) as caught:
        ModelCatalog(cards={"m": card("m")}, aliases={"a": "b", "b": "c", "c": "a"})
    assert caught.value.code == "alias_cycle"
    with pytest.raises(ValidationFailed):
        ModelCatalog(cards={"m": card("m")}, aliases={"a": "a"})


@pytest.mark.parametrize(
    ("cards", "aliases", "code"),
    [
        ({"m": card("m")}, {"a": "nope"}, "unknown_model_word"),  # alias to nothing
        ({"m": card("m")}, {"m": "m"}, "invalid"),  # a word is a model word or an alias, not both
        ({"m": card("other")}, {}, "invalid"),  # the key must be the card's own word
    ],
)
def test_catalog_refuses_inconsistent_words(
    cards: dict[str, ModelCard], aliases: dict[str, str], code: str
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        ModelCatalog(cards=cards, aliases=aliases)
    assert caught.value.code == code


def test_catalog_is_read_only_and_deterministic() -> None:
    one = ModelCatalog(cards={"b": card("b"), "a": card("a")}, aliases={"y": "a", "x": "b"})
    two = ModelCatalog(cards={"a": card("a"), "b": card("b")}, aliases={"x": "b", "y": "a"})
    assert one == two
    assert list(one.cards) == ["a", "b"] and list(one.aliases) == ["x", "y"]
    with pytest.raises(TypeError):
        one.cards["c"] = card("c")  # type: ignore[index]
    source = {"a": card("a")}
    three = ModelCatalog(cards=source)
    source["b"] = card("b")
    assert "b" not in three


# --- compaction enabled (O6) --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_enabled", "overlay", "expected"),
    [
        (None, None, True),
        (None, Overlay(), True),
        (None, Overlay(context_tokens=8_000), True),
        (None, Overlay(enabled=True), True),
        (None, Overlay(enabled=False), False),
        (True, None, True),
        (True, Overlay(), True),
        (True, Overlay(enabled=True), True),
        (True, Overlay(enabled=False), True),  # the request is the author
        (False, None, False),
        (False, Overlay(), False),
        (False, Overlay(enabled=True), False),
        (False, Overlay(enabled=False), False),
    ],
)
def test_compaction_enabled_truth_table(
    request_enabled: bool | None, overlay: Overlay | None, expected: bool
) -> None:
    assert compaction_enabled(request_enabled, overlay) is expected
