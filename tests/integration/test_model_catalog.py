"""The model catalog and live overlays through services, selectors, projections, the command and the admin
(SPEC §5 B1-B5, O1-O7)."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_app.catalog import selectors
from context_app.catalog.models import CatalogAlias, CatalogCard, ModelOverlay, ModelOverlayChange
from context_app.catalog.services import (
    DEFAULT_CATALOG,
    model_catalog_replace,
    model_overlay_clear,
    model_overlay_set,
)
from nexum.adapters.tokenization import UnknownEncoding, counter_for, default_registry
from nexum.core.catalog.cards import ModelCard
from nexum.core.catalog.changes import models_stream
from nexum.core.errors import ConcurrencyError, Conflict, DomainError, ValidationFailed
from nexum.eventstore import projections, reading
from nexum.eventstore.models import Event
from tests.tokenizer_files import write_tiktoken

pytestmark = pytest.mark.django_db


def default_document() -> dict:
    return json.loads(DEFAULT_CATALOG.read_text())


@pytest.fixture
def catalog(project):
    model_catalog_replace(project_id=str(project.id), catalog=default_document(), actor="test")
    return project


def set_overlay(project, word: str, overlay: dict, actor: str = "test"):
    return model_overlay_set(project_id=str(project.id), word=word, overlay=overlay, actor=actor)


def events_in(project) -> int:
    return Event.objects.filter(stream_id=models_stream(str(project.id))).count()


# --- the default catalog and the command --------------------------------------------------------------------


def test_the_command_loads_the_default_catalog_once(project, capsys):
    call_command("load_model_catalog", "--project", project.slug)
    assert "loaded" in capsys.readouterr().out
    call_command("load_model_catalog", "--project", project.slug)
    assert "unchanged" in capsys.readouterr().out
    assert events_in(project) == 1
    document = selectors.catalog_document_for(str(project.id))
    assert [card.word for card in document.cards] == ["frontier", "local", "quick"]
    assert document.tiers == {"best": "frontier", "cheap": "quick"}
    assert document.aliases == {"local-70b": "local"}
    quick = selectors.budget_for(project_id=str(project.id), word="cheap")
    assert (quick.card.context_window, quick.budget.size_class, quick.budget.context_tokens) == (
        32_768,
        "small",
        8_000,
    )
    local = selectors.budget_for(project_id=str(project.id), word="local-70b")
    assert (local.card.context_window, local.budget.size_class) == (131_072, "standard")
    best = selectors.budget_for(project_id=str(project.id), word="best")
    assert (best.card.context_window, best.card.max_output_tokens) == (200_000, 16_384)
    assert (best.budget.size_class, best.budget.context_tokens, best.budget.reserve_output_tokens) == (
        "frontier",
        48_000,
        16_384,
    )


def test_the_command_loads_a_file_and_refuses_clearly(project, tmp_path):
    document = default_document()
    document["cards"][0]["encoding"] = "no_such_encoding"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    with pytest.raises(CommandError, match="unknown_encoding"):
        call_command("load_model_catalog", "--project", project.slug, "--file", str(bad))
    for contents, message in (("{", "not JSON"), ('{"cards": [{"word": "x"}]}', "cards\\[0\\].model_id")):
        bad.write_text(contents)
        with pytest.raises(CommandError, match=message):
            call_command("load_model_catalog", "--project", project.slug, "--file", str(bad))
    with pytest.raises(CommandError, match="cannot read"):
        call_command(
            "load_model_catalog", "--project", project.slug, "--file", str(tmp_path / "missing.json")
        )
    with pytest.raises(CommandError, match="no project"):
        call_command("load_model_catalog", "--project", "nope")
    assert events_in(project) == 0
    good = tmp_path / "good.json"
    good.write_text(
        json.dumps({"cards": [{"word": "solo", "model_id": "m", "tier": "local", "context_window": 4096}]})
    )
    call_command("load_model_catalog", "--project", project.slug, "--file", str(good))
    assert selectors.catalog_for(str(project.id)).words() == ("solo",)


def test_an_unknown_encoding_is_refused_at_catalog_load_with_nothing_written(project):
    document = default_document()
    document["cards"][2]["encoding"] = "o200k_imaginary"
    with pytest.raises(UnknownEncoding) as raised:
        model_catalog_replace(project_id=str(project.id), catalog=document, actor="test")
    assert raised.value.code == "unknown_encoding"
    assert raised.value.field == "cards[2].encoding"
    assert events_in(project) == 0


def test_an_operator_encoding_from_a_local_file_serves_a_card(project, tmp_path, settings):
    path = tmp_path / "tiny.tiktoken"
    write_tiktoken(path, [b"ab", b"abab"])
    settings.NEXUM_TOKENIZER_ENCODINGS = {"tiny-bpe": str(path)}
    default_registry.cache_clear()
    try:
        card = {
            "word": "tiny",
            "model_id": "m",
            "tier": "local",
            "context_window": 4096,
            "encoding": "tiny-bpe",
        }
        document = {"cards": [card]}
        model_catalog_replace(project_id=str(project.id), catalog=document, actor="test")
        choice = selectors.budget_for(project_id=str(project.id), word="tiny")
        assert choice.card.encoding == "tiny-bpe"
        assert counter_for(choice.card.encoding).count("abab ab") == 3  # "abab", " ", "ab"
    finally:
        default_registry.cache_clear()


# --- overlays: live, audited, checked against the catalog in force ------------------------------------------


def test_budget_lookups_see_an_overlay_set_after_the_previous_lookup(catalog):
    project_id = str(catalog.id)
    before = selectors.budget_for(project_id=project_id, word="frontier")
    set_overlay(catalog, "frontier", {"context_tokens": 20_000})
    during = selectors.budget_for(project_id=project_id, word="frontier")
    model_overlay_clear(project_id=project_id, word="frontier", actor="test")
    after = selectors.budget_for(project_id=project_id, word="frontier")
    assert (before.budget.window, during.budget.window, after.budget.window) == (200_000, 20_000, 200_000)
    assert during.budget.context_tokens == 20_000 - 10_000  # reserve capped at half the window
    assert during.overlay is not None and before.overlay is None


def test_an_overlay_on_a_stand_in_word_applies_only_to_its_own_model(catalog):
    project_id = str(catalog.id)
    set_overlay(catalog, "best", {"context_tokens": 30_000, "enabled": False})
    for word in ("best", "frontier"):  # best names frontier's model: a call under frontier falls back to it
        choice = selectors.budget_for(project_id=project_id, word=word)
        assert choice.budget.window == 30_000
        assert choice.compaction_enabled is False
    for word in ("quick", "cheap", "local", "local-70b"):  # other models: never
        choice = selectors.budget_for(project_id=project_id, word=word)
        assert choice.overlay is None and choice.compaction_enabled is True
    # the call's own word wins whole over a stand-in's overlay
    set_overlay(catalog, "frontier", {"auto_compact_tokens": 90_000})
    own = selectors.budget_for(project_id=project_id, word="frontier")
    assert (own.budget.window, own.auto_compact_tokens, own.compaction_enabled) == (200_000, 90_000, True)
    # the request's own compaction choice outranks the overlay's
    assert (
        selectors.budget_for(project_id=project_id, word="best", compaction=True).compaction_enabled is True
    )


def test_a_pinned_card_has_no_overlay(catalog):
    set_overlay(catalog, "frontier", {"context_tokens": 10_000})
    set_overlay(catalog, "best", {"context_tokens": 10_000})
    card = selectors.catalog_for(str(catalog.id)).resolve("frontier")
    pinned = selectors.budget_for(project_id=str(catalog.id), word=card)
    assert pinned.word is None and pinned.overlay is None
    assert pinned.budget.window == 200_000
    other = ModelCard(word="elsewhere", model_id="m", tier="local", context_window=16_000)
    assert selectors.budget_for(project_id=str(catalog.id), word=other).budget.window == 16_000


def test_overrides_are_checked_and_applied(catalog):
    choice = selectors.budget_for(
        project_id=str(catalog.id), word="local", overrides={"context_tokens": 50_000}
    )
    assert choice.budget.context_tokens == 50_000
    for overrides, field in (
        ({"context_tokens": 0}, "overrides.context_tokens"),
        ({"tools": 1}, "overrides.tools"),
    ):
        with pytest.raises(ValidationFailed) as raised:
            selectors.budget_for(project_id=str(catalog.id), word="local", overrides=overrides)
        assert raised.value.field == field


@pytest.mark.parametrize("word", ["constructor", "__class__", "__proto__"])
def test_prototype_names_are_ordinary_words_through_the_service(project, word):
    project_id = str(project.id)
    with pytest.raises(ValidationFailed) as raised:
        set_overlay(project, word, {"context_tokens": 1_000})
    assert raised.value.code == "unknown_model_word"
    with pytest.raises(ValidationFailed):
        selectors.budget_for(project_id=project_id, word=word)
    document = default_document()
    document["aliases"][word] = "quick"
    model_catalog_replace(project_id=project_id, catalog=document, actor="test")
    set_overlay(project, word, {"context_tokens": 16_000})
    assert selectors.budget_for(project_id=project_id, word=word).budget.window == 16_000
    assert selectors.budget_for(project_id=project_id, word="quick").budget.window == 16_000  # stand-in
    assert selectors.budget_for(project_id=project_id, word="local").budget.window == 131_072


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"context_tokens": 0}, "context_tokens"),
        ({"context_tokens": -5}, "context_tokens"),
        ({"context_tokens": 3.5}, "context_tokens"),
        ({"context_tokens": "8k"}, "context_tokens"),
        ({"context_tokens": 10**12}, "context_tokens"),
        ({"colour": 1}, "colour"),
        ({"enabled": "yes"}, "enabled"),
        ({}, "overlay"),
    ],
)
def test_a_malformed_overlay_writes_nothing(catalog, value, field):
    before = events_in(catalog)
    with pytest.raises(ValidationFailed) as raised:
        set_overlay(catalog, "quick", value)
    assert raised.value.field == field
    assert events_in(catalog) == before
    assert not ModelOverlay.objects.exists()


def test_overlay_changes_are_events_with_who_when_old_and_new(catalog):
    set_overlay(catalog, "quick", {"context_tokens": 16_000}, actor="ops:ann")
    set_overlay(catalog, "quick", {"context_tokens": 16_000}, actor="ops:ann")  # same value: nothing written
    set_overlay(catalog, "quick", {"context_tokens": 12_000, "enabled": False}, actor="ops:bob")
    model_overlay_clear(project_id=str(catalog.id), word="quick", actor="ops:cy")
    model_overlay_clear(project_id=str(catalog.id), word="quick", actor="ops:cy")  # nothing to clear
    stream = reading.read_stream(models_stream(str(catalog.id)))
    overlay_events = [(s.event_type, s.metadata["actor"], s.data) for s in stream[1:]]
    assert overlay_events == [
        ("ModelOverlaySet", "ops:ann", {"word": "quick", "old": None, "new": {"context_tokens": 16_000}}),
        (
            "ModelOverlaySet",
            "ops:bob",
            {
                "word": "quick",
                "old": {"context_tokens": 16_000},
                "new": {"context_tokens": 12_000, "enabled": False},
            },
        ),
        (
            "ModelOverlayCleared",
            "ops:cy",
            {"word": "quick", "old": {"context_tokens": 12_000, "enabled": False}},
        ),
    ]
    changes = list(ModelOverlayChange.objects.order_by("position").values_list("actor", "old", "new"))
    assert changes == [
        ("ops:ann", None, {"context_tokens": 16_000}),
        ("ops:bob", {"context_tokens": 16_000}, {"context_tokens": 12_000, "enabled": False}),
        ("ops:cy", {"context_tokens": 12_000, "enabled": False}, None),
    ]
    assert all(change.recorded_at is not None for change in ModelOverlayChange.objects.all())


def test_a_catalog_change_orphaning_an_overlay_word_is_refused(catalog):
    set_overlay(catalog, "cheap", {"context_tokens": 9_000})
    document = default_document()
    del document["tiers"]["cheap"]
    before = events_in(catalog)
    with pytest.raises(Conflict) as raised:
        model_catalog_replace(project_id=str(catalog.id), catalog=document, actor="test")
    assert raised.value.code == "overlay_word_orphaned"
    assert events_in(catalog) == before
    assert CatalogAlias.objects.filter(word="cheap").exists()
    model_overlay_clear(project_id=str(catalog.id), word="cheap", actor="test")
    model_catalog_replace(project_id=str(catalog.id), catalog=document, actor="test")
    assert not CatalogAlias.objects.filter(word="cheap").exists()


def test_a_stale_expected_version_is_a_concurrency_error(catalog):
    with pytest.raises(ConcurrencyError):
        model_overlay_set(
            project_id=str(catalog.id),
            word="quick",
            overlay={"enabled": False},
            actor="t",
            expected_version=0,
        )
    change = model_overlay_set(
        project_id=str(catalog.id), word="quick", overlay={"enabled": False}, actor="t", expected_version=1
    )
    assert (change.changed, change.version) == (True, 2)


def test_catalogs_and_overlays_are_per_project(catalog, other_project):
    set_overlay(catalog, "quick", {"context_tokens": 9_000})
    assert selectors.catalog_for(str(other_project.id)).words() == ()
    with pytest.raises(ValidationFailed):
        set_overlay(other_project, "quick", {"context_tokens": 9_000})
    model_catalog_replace(project_id=str(other_project.id), catalog=default_document(), actor="test")
    assert selectors.budget_for(project_id=str(other_project.id), word="quick").budget.window == 32_768
    assert CatalogCard.objects.filter(project=other_project).count() == 3


# --- rebuilt projections equal live ones --------------------------------------------------------------------

WORDS = ["quick", "local", "frontier", "best", "cheap", "local-70b", "constructor", "extra"]
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("set"),
            st.sampled_from(WORDS),
            st.integers(1, 300_000),
            st.sampled_from([None, True, False]),
        ),
        st.tuples(st.just("clear"), st.sampled_from(WORDS), st.none(), st.none()),
        st.tuples(st.just("catalog"), st.sampled_from(["default", "extra", "shrunk"]), st.none(), st.none()),
    ),
    min_size=1,
    max_size=15,
)


def catalog_variant(name: str) -> dict:
    document = default_document()
    if name == "extra":
        document["aliases"]["extra"] = "frontier"
        document["aliases"]["constructor"] = "quick"
    elif name == "shrunk":
        document["cards"] = [card for card in document["cards"] if card["word"] != "local"]
        document["aliases"] = {"local": "quick"}  # a model word becomes an alias
        del document["tiers"]["cheap"]
    return document


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps)
def test_rebuilt_catalog_read_models_equal_the_live_ones(project, script):
    project_id = str(project.id)
    with transaction.atomic():
        model_catalog_replace(project_id=project_id, catalog=default_document(), actor="test")
        for kind, word, tokens, enabled in script:
            try:
                if kind == "set":
                    set_overlay(project, word, {"context_tokens": tokens, "enabled": enabled})
                elif kind == "clear":
                    model_overlay_clear(project_id=project_id, word=word, actor="test")
                else:
                    model_catalog_replace(project_id=project_id, catalog=catalog_variant(word), actor="test")
            except DomainError:
                pass  # refusals write nothing; the rest of the script goes on
        live = projections.snapshot()
        live_view = selectors.catalog_view(project_id)
        projections.rebuild()
        assert projections.snapshot() == live
        assert selectors.catalog_view(project_id) == live_view
        transaction.set_rollback(True)


# --- the admin: overlay edits go through the audited service ------------------------------------------------


def test_an_admin_overlay_edit_goes_through_the_audited_service(catalog, admin_client, admin_user):
    add = admin_client.post(
        "/admin/catalog/modeloverlay/add/",
        {"project": str(catalog.id), "word": "best", "context_tokens": "40000", "enabled": "unknown"},
    )
    assert add.status_code == 302, add.content
    overlay = ModelOverlay.objects.get(word="best")
    assert (overlay.context_tokens, overlay.enabled, overlay.updated_by) == (40_000, None, "admin:admin")
    change_url = f"/admin/catalog/modeloverlay/{overlay.pk}/change/"
    page = admin_client.get(change_url)
    assert page.status_code == 200 and b"admin:admin" in page.content
    edit = admin_client.post(
        change_url, {"context_tokens": "30000", "auto_compact_tokens": "", "enabled": "false"}
    )
    assert edit.status_code == 302, edit.content
    assert selectors.budget_for(project_id=str(catalog.id), word="frontier").budget.window == 30_000
    before = events_in(catalog)
    refused = admin_client.post(
        change_url, {"context_tokens": "0", "auto_compact_tokens": "", "enabled": "unknown"}
    )
    assert refused.status_code == 200 and b"context_tokens" in refused.content
    unknown = admin_client.post(
        "/admin/catalog/modeloverlay/add/",
        {"project": str(catalog.id), "word": "nope", "context_tokens": "1000"},
    )
    assert unknown.status_code == 200 and b"unknown model word" in unknown.content
    assert events_in(catalog) == before
    deleted = admin_client.post(f"/admin/catalog/modeloverlay/{overlay.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert not ModelOverlay.objects.exists()
    stream = reading.read_stream(models_stream(str(catalog.id)))
    audit = [(s.event_type, s.metadata["actor"], s.data.get("old"), s.data.get("new")) for s in stream[1:]]
    assert audit == [
        ("ModelOverlaySet", "admin:admin", None, {"context_tokens": 40_000}),
        (
            "ModelOverlaySet",
            "admin:admin",
            {"context_tokens": 40_000},
            {"context_tokens": 30_000, "enabled": False},
        ),
        ("ModelOverlayCleared", "admin:admin", {"context_tokens": 30_000, "enabled": False}, None),
    ]
    history = admin_client.get("/admin/catalog/modeloverlaychange/")
    assert history.status_code == 200 and b"admin:admin" in history.content
    for path in (
        "/admin/catalog/catalogcard/",
        "/admin/catalog/catalogalias/",
        "/admin/catalog/modeloverlay/",
    ):
        assert admin_client.get(path).status_code == 200
    assert admin_client.get("/admin/catalog/catalogcard/add/").status_code == 403
