"""Sources confined through the API (issue 12): a source outside the operator's roots or allowlist is 422
``source_not_allowed`` naming the option, nothing written; a resolve re-checks every read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from nexum.eventstore.models import Event
from tests.source_fixtures import SERVED_TEXT, json_server, server_folders


@pytest.fixture
def layout(settings, tmp_path) -> dict[str, Path]:
    """The server's folders as the defaults lay them out, under tmp_path, and the settings that name them."""
    places = server_folders(tmp_path)
    settings.DATA_DIR = places["data"]
    settings.NEXUM_ARTIFACT_ROOT = places["artifacts"]
    settings.NEXUM_WORKSPACE_ROOT = places["workspace"]
    settings.NEXUM_SOURCE_ROOTS = [places["workspace"], Path(django_settings.BASE_DIR) / "examples"]
    settings.NEXUM_SOURCE_HTTP_ALLOW = []
    return places


def _source(api, kind: str, **config: object):
    return api.post("/api/v1/sources", {"name": "s", "kind": kind, "config": config}, format="json")


def _refused(response, option: str) -> None:
    assert response.status_code == 422, response.json()
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("source_not_allowed", f"config.{option}")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "where",
    ["/etc", "../..", "../../../../etc", "{data}", "{artifacts}", "{workspace}", "{globex}",
     "{acme}/../globex", "{outside}"],
)  # fmt: skip
def test_a_folder_source_outside_the_roots_is_refused_and_nothing_is_written(operator_api, layout, where):
    events = Event.objects.count()
    path = where.format(**{name: str(place) for name, place in layout.items()})
    for kind in ("folder", "docs"):
        _refused(_source(operator_api, kind, path=path), "path")
    _refused(_source(operator_api, "tickets_json", path=f"{path}/plans.md"), "path")
    assert Event.objects.count() == events
    assert operator_api.get("/api/v1/sources").json()["results"] == []


@pytest.mark.django_db
def test_the_projects_own_workspace_and_the_examples_are_allowed(operator_api, layout):
    assert _source(operator_api, "folder", path=str(layout["acme"] / "repo")).status_code == 201
    examples = Path(django_settings.BASE_DIR) / "examples" / "auth-service" / "docs"
    response = operator_api.post(
        "/api/v1/sources", {"name": "d", "kind": "docs", "config": {"path": str(examples)}}, format="json"
    )
    assert response.status_code == 201, response.json()


@pytest.mark.django_db
def test_another_projects_workspace_is_its_own_not_ours(operator_api, other_operator_api, layout):
    _refused(_source(operator_api, "folder", path=str(layout["globex"])), "path")
    assert _source(other_operator_api, "folder", path=str(layout["globex"])).status_code == 201


def _resolve(api, source: str) -> dict:
    goal = api.post(
        "/api/v1/goals", {"objective": "Ship", "tasks": [{"key": "s1", "objective": "Deploy"}]}, format="json"
    ).json()
    task_id = goal["tasks"][0]["id"]
    assert (
        api.post(f"/api/v1/tasks/{task_id}/grants", {"sources": {source: []}}, format="json").status_code
        == 201
    )
    response = api.post(f"/api/v1/tasks/{task_id}/resolve", {"query": "deploy"}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()["bundle"]


@pytest.mark.django_db
def test_a_symlink_planted_after_registration_is_not_followed_at_retrieve_time(operator_api, layout):
    assert _source(operator_api, "docs", path=str(layout["acme"] / "repo")).status_code == 201
    (layout["acme"] / "repo" / "leak.md").symlink_to(layout["outside"] / "secret.md")
    (layout["acme"] / "repo" / "neighbour.md").symlink_to(layout["globex"] / "plans.md")
    bundle = _resolve(operator_api, "s")
    texts = json.dumps(bundle["items"])
    assert "make release" in texts
    assert "hunter2" not in texts and "merger" not in texts


@pytest.mark.django_db
def test_a_source_folder_swapped_for_a_symlink_out_is_refused_at_retrieve_time(operator_api, layout):
    assert _source(operator_api, "docs", path=str(layout["acme"] / "repo")).status_code == 201
    repo = layout["acme"] / "repo"
    (repo / "deploy.md").unlink()
    repo.rmdir()
    repo.symlink_to(layout["outside"], target_is_directory=True)
    bundle = _resolve(operator_api, "s")
    assert bundle["items"] == []
    assert [(error["source"], error["kind"]) for error in bundle["source_errors"]] == [("s", "refused")]
    assert "hunter2" not in json.dumps(bundle)


@pytest.fixture
def feed() -> Iterator[int]:
    """The port of a local JSON server."""
    with json_server() as server:
        yield server.server_address[1]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "0.0.0.0", "[::1]", "127.1", "2130706433", "0x7f000001", "[::ffff:7f00:1]"],
)
def test_an_http_source_on_loopback_is_refused_by_default(operator_api, layout, feed, host):
    events = Event.objects.count()
    _refused(_source(operator_api, "http_json", url=f"http://{host}:{feed}/items"), "url")
    assert Event.objects.count() == events


@pytest.mark.django_db
def test_an_http_source_on_an_allowlisted_loopback_address_is_fetched(operator_api, layout, feed, settings):
    settings.NEXUM_SOURCE_HTTP_ALLOW = [f"127.0.0.1:{feed}"]
    assert _source(operator_api, "http_json", url=f"http://127.0.0.1:{feed}/items").status_code == 201
    _refused(
        operator_api.post(
            "/api/v1/sources",
            {"name": "other-port", "kind": "http_json", "config": {"url": f"http://127.0.0.1:{feed + 1}/"}},
            format="json",
        ),
        "url",
    )
    bundle = _resolve(operator_api, "s")
    assert [item["text"] for item in bundle["items"]] == [SERVED_TEXT]
