"""The catalog document, its value gate and the decisions of the models stream (SPEC §5, O1-O7).

No database."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nexum.core.catalog.changes import (
    MAX_TOKEN_COUNT,
    CatalogState,
    ModelCatalogReplaced,
    ModelOverlayCleared,
    ModelOverlaySet,
    catalog_document_from_data,
    decide_catalog_replace,
    decide_overlay_clear,
    decide_overlay_set,
    document_from_event,
)
from nexum.core.catalog.overlays import ContextWindowOverlay
from nexum.core.errors import Conflict, ValidationFailed
from nexum.core.events import event_from_data, event_to_data

DOCUMENT: dict[str, Any] = {
    "cards": [
        {"word": "quick", "model_id": "local/2b", "tier": "local", "context_window": 32_768,
         "capabilities": ["quick"], "latency_class": "fast"},
        {"word": "frontier", "model_id": "cloud/x", "tier": "cloud", "context_window": 200_000,
         "max_output_tokens": 16_384, "overrides": {"tool_count": 8}},
        {"word": "constructor", "model_id": "local/odd", "tier": "local", "context_window": 8_192},
    ],
    "aliases": {"__proto__": "constructor"},
    "tiers": {"best": "frontier", "cheap": "quick"},
}  # fmt: skip


A: dict[str, Any] = {"word": "a", "model_id": "m", "tier": "local"}


def document(**changes: Any):
    data = copy.deepcopy(DOCUMENT)
    data.update(changes)
    return catalog_document_from_data(data, where="test")


def state(overlays: dict[str, ContextWindowOverlay] | None = None) -> CatalogState:
    return CatalogState(document=document(), overlays=overlays or {})


def refusal(function, *args, **kwargs) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as raised:
        function(*args, **kwargs)
    return raised.value


def test_a_document_is_normalized_and_round_trips():
    parsed = document()
    assert [card.word for card in parsed.cards] == ["constructor", "frontier", "quick"]
    assert parsed.catalog.resolve("best").model_id == "cloud/x"
    assert parsed.catalog.resolve("__proto__").word == "constructor"
    assert parsed.words() == {"quick", "frontier", "constructor", "__proto__", "best", "cheap"}
    assert catalog_document_from_data(parsed.as_data(), where="again").as_data() == parsed.as_data()
    assert parsed.as_data()["cards"][1]["overrides"] == {"context_tokens": None, "tool_count": 8}
    assert parsed.as_data()["cards"][0]["encoding"] == "cl100k_base"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ([], "catalog"),
        ({"cards": [], "models": []}, "models"),
        ({"cards": "quick"}, "cards"),
        ({"cards": [], "\ud800": 1}, "catalog"),
        ({"cards": [A | {"model_id": "m\x00"}]}, "cards[0].model_id"),
        ({"cards": [A], "tiers": {"b": "\ud800"}}, "tiers.b"),
        ({"cards": [{"word": "a", "model_id": "m"}]}, "cards[0].tier"),
        ({"cards": [{"word": "a", "model_id": "m", "tier": "moon"}]}, "cards[0].tier"),
        ({"cards": [{"word": "a b", "model_id": "m", "tier": "local"}]}, "cards[0].word"),
        ({"cards": [{"word": "a/b", "model_id": "m", "tier": "local"}]}, "cards[0].word"),
        ({"cards": [A | {"context_window": 0}]}, "cards[0].context_window"),
        ({"cards": [A | {"context_window": 3.5}]}, "cards[0].context_window"),
        ({"cards": [A | {"context_window": "8k"}]}, "cards[0].context_window"),
        ({"cards": [A | {"context_window": True}]}, "cards[0].context_window"),
        ({"cards": [A | {"context_window": MAX_TOKEN_COUNT + 1}]},
         "cards[0].context_window"),
        ({"cards": [A | {"colour": "red"}]}, "cards[0].colour"),
        ({"cards": [A | {"capabilities": "quick"}]}, "cards[0].capabilities"),
        ({"cards": [A | {"overrides": {"tool_count": -1}}]},
         "cards[0].overrides.tool_count"),
        ({"cards": [A | {"overrides": {"window": 1}}]},
         "cards[0].overrides.window"),
        ({"cards": [A] * 2}, "cards[1].word"),
        ({"cards": [A], "aliases": {"b": "nope"}}, "aliases"),
        ({"cards": [A], "aliases": {"a": "a"}}, "aliases"),
        ({"cards": [A], "aliases": {"b": 3}}, "aliases.b"),
        ({"cards": [A], "aliases": {"b": "c", "c": "b"}}, "aliases"),
        ({"cards": [A], "aliases": {"b": "a"}, "tiers": {"b": "a"}},
         "tiers.b"),
    ],
)  # fmt: skip
def test_a_malformed_document_is_refused_naming_the_field(data, field):
    error = refusal(catalog_document_from_data, data, where="PUT catalog")
    assert error.field == field
    assert "PUT catalog" in error.message


def test_overlay_set_on_a_catalog_word_records_old_and_new():
    (event,) = decide_overlay_set(state(), "best", {"context_tokens": 50_000}, where="t")
    assert event == ModelOverlaySet(word="best", old=None, new={"context_tokens": 50_000})
    current = state({"best": ContextWindowOverlay(context_tokens=50_000)})
    (event,) = decide_overlay_set(current, "best", {"enabled": False}, where="t")
    assert event == ModelOverlaySet(word="best", old={"context_tokens": 50_000}, new={"enabled": False})
    assert decide_overlay_set(current, "best", {"context_tokens": 50_000}, where="t") == []


@pytest.mark.parametrize("word", ["constructor", "__proto__"])
def test_prototype_names_are_ordinary_words(word):
    (event,) = decide_overlay_set(state(), word, {"context_tokens": 4_096}, where="t")
    assert event.word == word


@pytest.mark.parametrize("word", ["__class__", "toString", "hasOwnProperty", "nope", "", "BEST"])
def test_an_unknown_word_is_refused(word):
    error = refusal(decide_overlay_set, state(), word, {"context_tokens": 4_096}, where="t")
    assert (error.code, error.field) == ("unknown_model_word", "word")
    error = refusal(decide_overlay_clear, state(), word, where="t")
    assert error.code == "unknown_model_word"


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"context_tokens": 0}, "context_tokens"),
        ({"context_tokens": -5}, "context_tokens"),
        ({"context_tokens": 3.5}, "context_tokens"),
        ({"context_tokens": "8k"}, "context_tokens"),
        ({"context_tokens": MAX_TOKEN_COUNT + 1}, "context_tokens"),
        ({"auto_compact_tokens": 8000.0}, "auto_compact_tokens"),
        ({"enabled": "yes"}, "enabled"),
        ({"window": 5}, "window"),
        ({}, "overlay"),
        ({"enabled": None}, "overlay"),
        ({"\ud800": 1}, "overlay"),
        ({"context_tokens": 5, "x\x00": 1}, "overlay"),
        ({"enabled": "\ud800"}, "enabled"),
        (None, "overlay"),
        (8000, "overlay"),
    ],
)
def test_a_malformed_overlay_is_refused_naming_the_member(value, field):
    error = refusal(decide_overlay_set, state(), "quick", value, where="PUT x")
    assert error.field == field
    assert "PUT x" in error.message


def test_clearing_records_the_old_value_and_is_idempotent():
    current = state({"quick": ContextWindowOverlay(context_tokens=9_000)})
    assert decide_overlay_clear(current, "quick", where="t") == [
        ModelOverlayCleared(word="quick", old={"context_tokens": 9_000})
    ]
    assert decide_overlay_clear(state(), "quick", where="t") == []


def test_a_catalog_change_that_orphans_an_overlay_word_is_a_conflict():
    current = state({"cheap": ContextWindowOverlay(context_tokens=9_000)})
    smaller = document(tiers={"best": "frontier"})
    with pytest.raises(Conflict) as raised:
        decide_catalog_replace(current, smaller, where="PUT catalog")
    assert raised.value.code == "overlay_word_orphaned"
    assert raised.value.details["words"] == ["cheap"]
    # without the overlay, the same change is fine and names what it removes
    (event,) = decide_catalog_replace(state(), smaller, where="PUT catalog")
    assert isinstance(event, ModelCatalogReplaced)
    assert event.removed_words == ("cheap",)


def test_the_catalog_in_force_again_decides_nothing_and_events_round_trip():
    assert decide_catalog_replace(state(), document(), where="t") == []
    (event,) = decide_catalog_replace(CatalogState(), document(), where="t")
    assert event.removed_words == ()
    stored = event_from_data("ModelCatalogReplaced", event_to_data(event))
    assert document_from_event(stored).as_data() == document().as_data()
