"""GET /models, PUT|DELETE /models/{word}/overlay, GET|PUT /models/catalog (SPEC I1, O1-O7)."""

from __future__ import annotations

import json

import pytest

from context_app.catalog import selectors
from context_app.catalog.services import DEFAULT_CATALOG, model_catalog_replace, model_overlay_set
from nexum.eventstore.models import Event

pytestmark = pytest.mark.django_db


def assert_error(response, status: int, code: str, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["message"]
    if field is not None:
        assert error["field"] == field, error
    return error


def default_document() -> dict:
    return json.loads(DEFAULT_CATALOG.read_text())


@pytest.fixture
def catalog(project):
    model_catalog_replace(project_id=str(project.id), catalog=default_document(), actor="test")
    return project


def put_overlay(api, word: str, body):
    return api.put(f"/api/v1/models/{word}/overlay", body, format="json")


def test_models_lists_every_word_with_its_budget_now(api, catalog):
    body = api.get("/api/v1/models").json()
    assert body["version"] == 1
    assert [card["word"] for card in body["cards"]] == ["frontier", "local", "quick"]
    assert body["tiers"] == {"best": "frontier", "cheap": "quick"} and body["aliases"] == {
        "local-70b": "local"
    }
    words = {entry["word"]: entry for entry in body["words"]}
    assert sorted(words) == ["best", "cheap", "frontier", "local", "local-70b", "quick"]
    best = words["best"]
    assert (best["kind"], best["target"], best["model_word"]) == ("tier", "frontier", "frontier")
    assert best["budget"] == {
        "size_class": "frontier",
        "context_tokens": 48_000,
        "tool_count": 20,
        "reasoning": "high",
        "reserve_output_tokens": 16_384,
        "window": 200_000,
        "safety_margin_tokens": 0,
    }
    assert (best["overlay"], best["overlay_in_force"], best["compaction_enabled"]) == (None, None, True)
    assert words["local-70b"]["kind"] == "alias" and words["quick"]["kind"] == "model"
    assert words["quick"]["budget"]["size_class"] == "small"


def test_an_empty_catalog_lists_nothing(api):
    assert api.get("/api/v1/models").json() == {
        "version": 0,
        "cards": [],
        "aliases": {},
        "tiers": {},
        "words": [],
    }


def test_put_then_delete_an_overlay(operator_api, catalog):
    response = put_overlay(operator_api, "best", {"context_tokens": 64_000, "enabled": False})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["changed"], body["version"], body["previous"]) == (True, 2, None)
    assert body["model"]["overlay"] == {"context_tokens": 64_000, "enabled": False}
    assert body["model"]["budget"]["window"] == 64_000
    words = {entry["word"]: entry for entry in operator_api.get("/api/v1/models").json()["words"]}
    assert words["frontier"]["overlay"] is None
    assert words["frontier"]["overlay_in_force"] == {"context_tokens": 64_000, "enabled": False}
    assert words["frontier"]["compaction_enabled"] is False
    assert words["quick"]["overlay_in_force"] is None
    again = put_overlay(operator_api, "best", {"context_tokens": 64_000, "enabled": False}).json()
    assert (again["changed"], again["version"]) == (False, 2)
    deleted = operator_api.delete("/api/v1/models/best/overlay")
    assert deleted.status_code == 200
    assert deleted.json()["previous"] == {"context_tokens": 64_000, "enabled": False}
    assert deleted.json()["model"]["budget"]["window"] == 200_000
    assert operator_api.delete("/api/v1/models/best/overlay").json()["changed"] is False


def test_budget_for_sees_an_overlay_put_between_two_lookups(operator_api, catalog):
    first = selectors.budget_for(project_id=str(catalog.id), word="local")
    assert put_overlay(operator_api, "local", {"context_tokens": 16_000}).status_code == 200
    second = selectors.budget_for(project_id=str(catalog.id), word="local")
    assert first.budget != second.budget
    assert (first.budget.window, second.budget.window) == (131_072, 16_000)
    assert (first.budget.context_tokens, second.budget.context_tokens) == (24_000, 16_000 - 8_000)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"context_tokens": 0}, "context_tokens"),
        ({"context_tokens": -5}, "context_tokens"),
        ({"context_tokens": 3.5}, "context_tokens"),
        ({"context_tokens": "8k"}, "context_tokens"),
        ({"context_tokens": "8000"}, "context_tokens"),
        ({"context_tokens": 8000.0}, "context_tokens"),
        ({"context_tokens": 10**20}, "context_tokens"),
        ({"auto_compact_tokens": True}, "auto_compact_tokens"),
        ({"colour": "red"}, "colour"),
        ({"enabled": "yes"}, "enabled"),
        ({"enabled": 1}, "enabled"),
        ({}, "overlay"),
        ([1, 2], "overlay"),
        (7, "overlay"),
    ],
)
def test_a_malformed_overlay_is_400_naming_the_field_and_writes_nothing(operator_api, catalog, body, field):
    before = Event.objects.count()
    response = put_overlay(operator_api, "quick", body)
    error = assert_error(response, 400, "empty_overlay" if body == {} else "invalid", field)
    assert "PUT /api/v1/models/quick/overlay" in error["message"]
    assert Event.objects.count() == before


def test_an_empty_overlay_has_its_own_code(operator_api, catalog):
    assert_error(put_overlay(operator_api, "quick", {}), 400, "empty_overlay", "overlay")
    assert_error(put_overlay(operator_api, "quick", {"enabled": None}), 400, "empty_overlay", "overlay")


@pytest.mark.parametrize(
    "body", ['{"\\ud800": 1}', '{"context_tokens": 5, "x\\u0000": 1}', '{"enabled": "\\udfff"}']
)
def test_unstorable_text_in_a_body_is_400_not_500(operator_api, catalog, body):
    before = Event.objects.count()
    for path in ("/api/v1/models/quick/overlay", "/api/v1/models/catalog"):
        response = operator_api.put(path, body, content_type="application/json")
        assert response.status_code == 400, response.content
    assert Event.objects.count() == before


def test_a_malformed_json_body_is_400(operator_api, catalog):
    before = Event.objects.count()
    response = operator_api.put("/api/v1/models/quick/overlay", "{nope", content_type="application/json")
    assert_error(response, 400, "malformed_request")
    assert Event.objects.count() == before


@pytest.mark.parametrize("word", ["nope", "QUICK", "constructor", "__proto__", "__class__", "x" * 300])
def test_an_unknown_word_in_the_path_is_404_and_writes_nothing(operator_api, catalog, word):
    before = Event.objects.count()
    assert_error(
        put_overlay(operator_api, word, {"context_tokens": 1_000}), 404, "unknown_model_word", "word"
    )
    assert_error(operator_api.delete(f"/api/v1/models/{word}/overlay"), 404, "unknown_model_word", "word")
    assert Event.objects.count() == before


@pytest.mark.parametrize("word", ["constructor", "__proto__", "__class__"])
def test_prototype_names_are_ordinary_words_through_the_api(operator_api, catalog, word):
    document = default_document()
    document["cards"].append(
        {
            "word": word,
            "model_id": f"local/{word}",
            "tier": "local",
            "context_window": 50_000,
            "latency_class": "fast",
        }
    )
    assert operator_api.put("/api/v1/models/catalog", document, format="json").status_code == 200
    body = put_overlay(operator_api, word, {"context_tokens": 12_000}).json()
    assert body["model"]["word"] == word and body["model"]["budget"]["window"] == 12_000
    words = {entry["word"]: entry for entry in operator_api.get("/api/v1/models").json()["words"]}
    assert words[word]["overlay"] == {"context_tokens": 12_000}
    assert all(words[other]["overlay_in_force"] is None for other in words if other != word)
    assert operator_api.delete(f"/api/v1/models/{word}/overlay").json()["changed"] is True


def test_the_catalog_document_round_trips(operator_api, catalog):
    document = operator_api.get("/api/v1/models/catalog").json()
    assert document["version"] == 1
    del document["version"]
    response = operator_api.put("/api/v1/models/catalog", document, format="json")
    assert response.status_code == 200 and response.json()["changed"] is False
    document["cards"][0]["context_window"] = 150_000
    changed = operator_api.put("/api/v1/models/catalog", document, format="json").json()
    assert (changed["changed"], changed["version"]) == (True, 2)
    words = {entry["word"]: entry for entry in operator_api.get("/api/v1/models").json()["words"]}
    assert words["best"]["window"] == 150_000


def test_a_catalog_with_an_unknown_encoding_is_400_and_writes_nothing(operator_api, catalog):
    document = default_document()
    document["cards"][1]["encoding"] = "p50k_from_nowhere"
    before = Event.objects.count()
    assert_error(
        operator_api.put("/api/v1/models/catalog", document, format="json"),
        400,
        "unknown_encoding",
        "cards[1].encoding",
    )
    assert Event.objects.count() == before


@pytest.mark.parametrize(
    ("mutate", "code", "field"),
    [
        (lambda d: d["cards"][0].update(context_window=0), "invalid", "cards[0].context_window"),
        (lambda d: d["cards"][0].update(context_window="200k"), "invalid", "cards[0].context_window"),
        (lambda d: d["cards"][0].update(context_window=10**20), "invalid", "cards[0].context_window"),
        (lambda d: d["cards"][0].update(tier="orbit"), "invalid", "cards[0].tier"),
        (lambda d: d["cards"][0].update(price=3), "invalid", "cards[0].price"),
        (lambda d: d["cards"][0].update(model_id="a\x00b"), "invalid", "cards[0].model_id"),
        (lambda d: d["cards"][0].update(model_id="a\ud800b"), "invalid", "cards[0].model_id"),
        (lambda d: d["cards"][0].update(capabilities=["x\x00"]), "invalid", "cards[0].capabilities[0]"),
        (lambda d: d["cards"][0].update(latency_class="f" * 201), "invalid", "cards[0].latency_class"),
        (lambda d: d["tiers"].update(top="nowhere"), "unknown_model_word", "aliases"),
        (lambda d: d["aliases"].update(quick="local"), "invalid", "aliases"),
        (lambda d: d.update(endpoints={}), "invalid", "endpoints"),
        (lambda d: d.update(cards={}), "invalid", "cards"),
    ],
)
def test_a_malformed_catalog_is_400_and_writes_nothing(operator_api, catalog, mutate, code, field):
    document = default_document()
    mutate(document)
    before = Event.objects.count()
    body = json.dumps(document)  # ASCII-escaped, so lone surrogates reach the server as sent
    assert_error(
        operator_api.put("/api/v1/models/catalog", body, content_type="application/json"),
        400,
        code,
        field,
    )
    assert Event.objects.count() == before


def test_a_catalog_orphaning_an_overlay_word_is_409_and_writes_nothing(operator_api, catalog):
    put_overlay(operator_api, "local-70b", {"context_tokens": 30_000})
    document = default_document()
    document["aliases"] = {}
    before = Event.objects.count()
    error = assert_error(
        operator_api.put("/api/v1/models/catalog", document, format="json"),
        409,
        "overlay_word_orphaned",
    )
    assert error["details"]["words"] == ["local-70b"]
    assert Event.objects.count() == before
    operator_api.delete("/api/v1/models/local-70b/overlay")
    assert operator_api.put("/api/v1/models/catalog", document, format="json").status_code == 200


def test_another_projects_catalog_is_invisible(operator_api, catalog, other_operator_api, other_project):
    model_overlay_set(
        project_id=str(catalog.id), word="quick", overlay={"context_tokens": 9_000}, actor="test"
    )
    assert other_operator_api.get("/api/v1/models").json()["words"] == []
    assert_error(
        put_overlay(other_operator_api, "quick", {"context_tokens": 1_000}), 404, "unknown_model_word"
    )
    assert_error(other_operator_api.delete("/api/v1/models/quick/overlay"), 404, "unknown_model_word")
    assert selectors.overlays_for(str(catalog.id))["quick"].context_tokens == 9_000


def test_the_endpoints_need_a_token_and_are_in_the_schema(api, client):
    for path in ("/api/v1/models", "/api/v1/models/catalog"):
        assert client.get(path).status_code == 401
    assert client.put("/api/v1/models/quick/overlay", {}, content_type="application/json").status_code == 401
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    for path in ("/api/v1/models", "/api/v1/models/catalog", "/api/v1/models/{word}/overlay"):
        assert path in schema
