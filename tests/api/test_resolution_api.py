"""The resolver's REST API (SPEC I1): sources, grants, questions, resolve, bundles, escalations, the gate."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from context_app.resolution import tasks as resolution_tasks


@pytest.fixture(autouse=True)
def source_roots(settings, tmp_path) -> None:
    """File sources in these tests read from tmp_path."""
    settings.NEXUM_SOURCE_ROOTS = [tmp_path]


def _goal(api, **task: Any) -> dict[str, Any]:
    body = {"objective": "Ship", "tasks": [{"key": "s1", "objective": "Configure the deploy", **task}]}
    response = api.post("/api/v1/goals", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _tickets(tmp_path, name: str, records: list[dict[str, Any]]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(records))
    return str(path)


@pytest.mark.django_db
def test_the_resolve_path_through_the_api(
    api, operator_api, other_api, other_operator_api, tmp_path, monkeypatch
):
    for name, port in (("ops", 8080), ("wiki", 9090)):
        path = _tickets(
            tmp_path, name, [{"id": "1", "subject": "deploy port", "text": f"The port is {port}."}]
        )
        response = operator_api.post(
            "/api/v1/sources", {"name": name, "kind": "tickets_json", "config": {"path": path}}, format="json"
        )
        assert response.status_code == 201, response.json()
    assert [s["name"] for s in api.get("/api/v1/sources").json()["results"]] == ["ops", "wiki"]
    assert other_api.get("/api/v1/sources").json()["results"] == []

    goal = _goal(api, inputs=["deploy port"])
    task_id = goal["tasks"][0]["id"]
    response = operator_api.post(
        f"/api/v1/goals/{goal['id']}/grants", {"sources": {"ops": ["*"], "wiki": []}}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert len(api.get(f"/api/v1/goals/{goal['id']}/grants").json()["results"]) == 1
    assert (
        other_operator_api.post(
            f"/api/v1/tasks/{task_id}/grants", {"sources": {"ops": []}}, format="json"
        ).status_code
        == 404
    )
    response = operator_api.put(
        f"/api/v1/tasks/{task_id}/questions",
        {"questions": [{"question": "Which port?", "subjects": ["deploy port"]}]},
        format="json",
    )
    assert response.status_code == 200 and response.json()["version"] == 1

    response = api.post(f"/api/v1/tasks/{task_id}/resolve", {}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["complete"] is False and len(body["bundle"]["items"]) == 2
    assert [e["kind"] for e in body["escalations"]] == ["conflict"]

    digest = body["bundle_digest"]
    assert api.get(f"/api/v1/bundles/{digest}").json()["digest"] == digest
    assert other_api.get(f"/api/v1/bundles/{digest}").status_code == 404
    assert api.get(f"/api/v1/tasks/{task_id}/bundle").json()["bundle_digest"] == digest

    refused = api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json")
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "plan_gate_closed"

    escalations = api.get("/api/v1/escalations?state=open").json()["results"]
    assert len(escalations) == 1 and other_api.get("/api/v1/escalations").json()["results"] == []
    escalation = escalations[0]
    evidence = escalation["evidence"]
    assert {e["source"] for e in evidence} == {"ops", "wiki"}
    bad = operator_api.post(
        f"/api/v1/escalations/{escalation['id']}/resolve",
        {"action": "pick_side", "chosen": ["x"]},
        format="json",
    )
    assert bad.status_code == 400
    untrusted = operator_api.post(
        f"/api/v1/escalations/{escalation['id']}/resolve",
        {"action": "pick_side", "chosen": [evidence[0]["digest"]], "content_trust": "untrusted_retrieved"},
        format="json",
    )
    assert untrusted.status_code == 422 and untrusted.json()["error"]["code"] == "untrusted_content"
    assert (
        other_operator_api.post(
            f"/api/v1/escalations/{escalation['id']}/resolve", {"action": "cancel"}, format="json"
        ).status_code
        == 404
    )
    done = operator_api.post(
        f"/api/v1/escalations/{escalation['id']}/resolve",
        {"action": "pick_side", "chosen": [evidence[0]["digest"]]},
        format="json",
    )
    assert done.status_code == 200 and done.json()["state"] == "resolved"
    again = operator_api.post(
        f"/api/v1/escalations/{escalation['id']}/resolve", {"action": "cancel"}, format="json"
    )
    assert again.status_code == 409
    assert api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").status_code == 200

    sent: list[tuple[Any, ...]] = []
    original = resolution_tasks.resolve_requested.apply_async

    def spy(*args: Any, **kwargs: Any) -> Any:
        sent.append(tuple(kwargs["args"]))
        return original(*args, **kwargs)

    monkeypatch.setattr(resolution_tasks.resolve_requested, "apply_async", spy)
    queued = api.post(f"/api/v1/tasks/{task_id}/resolve", {"async": True}, format="json")
    assert queued.status_code == 202, queued.json()
    # the Celery payload carries the queued request's id only
    assert len(sent) == 1 and len(sent[0]) == 1 and uuid.UUID(sent[0][0])
    # in process (Celery eager) the worker answered it already
    answered = api.get(queued.json()["url"]).json()
    assert answered["status"] == "done" and answered["bundle_digest"]
    assert api.get(f"/api/v1/bundles/{answered['bundle_digest']}").status_code == 200
    assert "port is" not in json.dumps(sent)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/sources", {"name": "x", "kind": "nope", "config": {}}),
        ("/api/v1/sources", {"name": "../x", "kind": "folder", "config": {"path": "/tmp"}}),
        ("/api/v1/sources", {"name": "x", "kind": "http_json", "config": {"url": "ftp://x"}}),
        ("/api/v1/sources", {"name": "x", "kind": "http_json", "config": {"url": "http://x", "bogus": 1}}),
        ("/api/v1/sources", {"name": "x", "kind": "folder", "config": "nope"}),
        ("/api/v1/sources", {"name": "x", "kind": "folder", "config": {}, "extra": 1}),
    ],
)
def test_bad_source_input_is_a_400_and_writes_nothing(api, operator_api, path, body):
    response = operator_api.post(path, body, format="json")
    assert response.status_code == 400, response.json()
    assert api.get("/api/v1/sources").json()["results"] == []


@pytest.mark.django_db
def test_bad_resolve_and_grant_input_is_refused_cleanly(api, operator_api, tmp_path):
    goal = _goal(api)
    task_id = goal["tasks"][0]["id"]
    assert (
        operator_api.post(
            f"/api/v1/tasks/{task_id}/grants", {"sources": {"ghost": []}}, format="json"
        ).status_code
        == 404
    )
    assert (
        operator_api.post(f"/api/v1/tasks/{task_id}/grants", {"sources": {}}, format="json").status_code
        == 400
    )
    assert operator_api.post(
        f"/api/v1/tasks/{task_id}/grants",
        {"sources": {"x": []}, "expires_at": "2001-01-01T00:00:00Z"},
        format="json",
    ).status_code in (400, 404)
    assert (
        operator_api.put(
            f"/api/v1/tasks/{task_id}/questions", {"questions": [{"q": 1}]}, format="json"
        ).status_code
        == 400
    )
    assert api.post(f"/api/v1/tasks/{task_id}/resolve", {"max_items": -1}, format="json").status_code == 400
    assert api.post("/api/v1/tasks/not-a-uuid/resolve", {}, format="json").status_code == 404
    assert api.post(f"/api/v1/tasks/{goal['id']}/resolve", {}, format="json").status_code == 400
    assert api.get("/api/v1/bundles/abc").status_code == 404
    assert api.get("/api/v1/escalations/nope").status_code == 404
    # a resolve with nothing granted still answers with a bundle
    response = api.post(f"/api/v1/tasks/{task_id}/resolve", {"max_items": 5}, format="json")
    assert response.status_code == 200 and response.json()["bundle"]["items"] == []


@pytest.mark.django_db
def test_the_schema_documents_the_resolver_endpoints(api):
    from django.test import Client

    schema = Client().get("/api/schema/", {"format": "json"}).json()
    for path in (
        "/api/v1/sources",
        "/api/v1/tasks/{task_id}/resolve",
        "/api/v1/escalations/{escalation_id}/resolve",
    ):
        assert path in schema["paths"]
