"""The task graph's REST API (SPEC I1, I3, I4): goals, tasks, transitions, scoping, completion refusal."""

from __future__ import annotations

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from rest_framework.test import APIClient

from nexum.eventstore.models import Event
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.tokens import agent_token_issue
from tests.api.test_foundation_api import assert_error

pytestmark = pytest.mark.django_db

PLAN = {
    "objective": "Ship the release",
    "constraints": ["no downtime"],
    "tasks": [
        {"key": "s1", "objective": "build", "risk": "low", "success_criteria": ["tests pass"]},
        {"key": "s2", "objective": "deploy", "depends_on": ["s1"], "risk": "high", "inputs": ["build id"]},
    ],
}


def create_goal(api, plan=PLAN, **headers) -> dict:
    response = api.post("/api/v1/goals", plan, format="json", **headers)
    assert response.status_code == 201, response.content
    return response.json()


def task_id(goal: dict, key: str) -> str:
    return next(task["id"] for task in goal["tasks"] if task["key"] == key)


def post(api, task: str, command: str, body: dict | None = None, **headers):
    return api.post(f"/api/v1/tasks/{task}/{command}", body or {}, format="json", **headers)


def test_create_a_goal_and_read_it_back(api):
    goal = create_goal(api)
    assert goal["is_goal"] and goal["goal_id"] == goal["id"] and goal["parent_id"] is None
    assert (goal["state"], goal["risk"], goal["version"]) == ("pending", "high", 1)
    assert goal["constraints"] == ["no downtime"]
    assert goal["progress"]["pending"] == 2
    assert [t["key"] for t in goal["tasks"]] == ["s1", "s2"]
    s2 = goal["tasks"][1]
    assert (s2["depends_on"], s2["inputs"], s2["risk"], s2["parent_id"]) == (
        ["s1"],
        ["build id"],
        "high",
        goal["id"],
    )
    assert api.get(f"/api/v1/goals/{goal['id']}").json() == goal
    listed = api.get("/api/v1/goals").json()
    assert len(listed["results"]) == 1 and listed["results"][0]["id"] == goal["id"]
    assert listed["next_cursor"] is None
    assert "tasks" not in listed["results"][0]


def test_goals_and_tasks_are_paginated_and_filtered(api):
    goals = [create_goal(api) for _ in range(3)]
    page = api.get("/api/v1/goals?limit=2").json()
    assert len(page["results"]) == 2 and page["next_cursor"]
    rest = api.get("/api/v1/goals", {"limit": 2, "cursor": page["next_cursor"]}).json()
    assert rest["next_cursor"] is None
    assert [g["id"] for g in page["results"] + rest["results"]] == [g["id"] for g in reversed(goals)]
    assert len(api.get("/api/v1/tasks").json()["results"]) == 6
    first = goals[0]
    only = api.get(f"/api/v1/tasks?goal={first['id']}").json()
    assert [t["key"] for t in only["results"]] == ["s1", "s2"]
    post(api, task_id(first, "s1"), "start")
    running = api.get("/api/v1/tasks?state=running").json()
    assert [t["id"] for t in running["results"]] == [task_id(first, "s1")]
    assert_error(api.get("/api/v1/tasks?state=done"), 400, "invalid", "state")
    assert_error(api.get("/api/v1/tasks?goal=nope"), 400, "invalid", "goal")
    assert_error(api.get(f"/api/v1/tasks?goal={uuid.uuid4()}"), 404, "not_found")
    assert_error(api.get("/api/v1/goals?limit=0"), 400, "invalid", "limit")


def test_the_lifecycle_through_the_api(api, operator_api):
    goal = create_goal(api)
    s1 = task_id(goal, "s1")
    response = post(api, s1, "start", {"reason": "go", "expected_version": 1})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["state"], body["attempt"], body["version"]) == ("running", 1, 2)
    assert post(api, s1, "fail", {"reason": "red"}).json()["state"] == "failed"
    assert post(api, s1, "start", {"reason": "retry"}).json()["attempt"] == 2
    assert post(api, s1, "block", {"reason": "need a human"}).json()["state"] == "blocked"
    assert api.get(f"/api/v1/goals/{goal['id']}").json()["state"] == "blocked"
    # A blocked task needs a human or an operator (T5); so does giving a task up.
    assert post(operator_api, s1, "unblock").json()["state"] == "running"
    assert post(operator_api, s1, "cancel", {"reason": "not needed"}).json()["state"] == "cancelled"
    detail = api.get(f"/api/v1/tasks/{s1}").json()
    assert detail["version"] == 7
    assert [(t["from_state"], t["to_state"]) for t in detail["transitions"]] == [
        ("", "pending"),
        ("pending", "running"),
        ("running", "failed"),
        ("failed", "running"),
        ("running", "blocked"),
        ("blocked", "running"),
        ("running", "cancelled"),
    ]
    assert [t["actor"] for t in detail["transitions"][1:]] == ["agent:agent-1"] * 4 + [
        "operator:operator-1"
    ] * 2
    assert detail["transitions"][-1]["reason"] == "not needed"


def test_a_cycle_is_refused_naming_it(api):
    plan = {
        "objective": "Loop",
        "tasks": [
            {"key": "s1", "objective": "a", "depends_on": ["s2"]},
            {"key": "s2", "objective": "b", "depends_on": ["s1"]},
        ],
    }
    before = Event.objects.count()
    error = assert_error(api.post("/api/v1/goals", plan, format="json"), 400, "dependency_cycle", "tasks")
    assert "s1 → s2 → s1" in error["message"]
    assert error["details"] == {"cycle": ["s1", "s2", "s1"]}
    assert Event.objects.count() == before


@pytest.mark.parametrize(
    ("plan", "status", "code", "field"),
    [
        ({**PLAN, "contract": {}}, 400, "unknown_field", "contract"),
        (
            {**PLAN, "tasks": [{"key": "s1", "objective": "x", "contract": []}]},
            400,
            "unknown_field",
            "tasks[0].contract",
        ),
        (
            {**PLAN, "tasks": [{"key": "s1", "objective": "x", "depends_on": ["zz"]}]},
            400,
            "unknown_dependency",
            None,
        ),
        ({**PLAN, "tasks": [{"key": "s1", "objective": "x"}] * 2}, 400, "duplicate_task_key", "tasks[1].key"),
        (
            {
                **PLAN,
                "tasks": [
                    {"key": "a", "objective": "x", "parent": "b"},
                    {"key": "b", "objective": "y", "parent": "a"},
                ],
            },
            400,
            "parent_cycle",
            "tasks",
        ),
        ({**PLAN, "tasks": []}, 400, "invalid", "tasks"),
        ({**PLAN, "tasks": ["s1"]}, 400, "invalid", None),
        ({**PLAN, "risk": "extreme"}, 400, "invalid", "risk"),
        ({"tasks": PLAN["tasks"]}, 400, "invalid", "objective"),
        ([1, 2], 400, "invalid", None),
    ],
)
def test_bad_goals_are_refused_and_nothing_is_written(api, plan, status, code, field):
    before = Event.objects.count()
    assert_error(api.post("/api/v1/goals", plan, format="json"), status, code, field)
    assert Event.objects.count() == before


def test_malformed_json_is_a_400(api):
    response = api.post("/api/v1/goals", "{not json", content_type="application/json")
    assert_error(response, 400, "malformed_request")


def test_start_before_dependencies_complete_is_409(api):
    goal = create_goal(api)
    before = Event.objects.count()
    error = assert_error(
        post(api, task_id(goal, "s2"), "start"), 409, "dependencies_not_completed", "depends_on"
    )
    assert error["details"] == {"waiting_for": {"s1": "pending"}}
    assert Event.objects.count() == before


def test_illegal_transitions_and_stale_versions_are_409_and_write_nothing(api, operator_api):
    goal = create_goal(api)
    s1 = task_id(goal, "s1")
    before = Event.objects.count()
    assert_error(post(api, s1, "fail"), 409, "illegal_transition", "state")
    assert_error(post(operator_api, s1, "unblock"), 409, "illegal_transition")
    assert_error(post(api, goal["id"], "start"), 409, "illegal_transition")
    assert_error(
        post(api, s1, "start", {"expected_version": 3}), 409, "concurrency_conflict", "expected_version"
    )
    assert_error(post(api, s1, "start", {"expected_version": -1}), 400, "invalid", "expected_version")
    assert_error(post(api, s1, "start", {"reason": "x" * 2001}), 400, "invalid", "reason")
    assert_error(post(api, s1, "start", {"force": True}), 400, "unknown_field", "force")
    assert Event.objects.count() == before
    post(operator_api, s1, "cancel")
    before = Event.objects.count()
    for command in ("start", "fail", "block"):
        assert_error(post(api, s1, command), 409, "illegal_transition")
    for command in ("start", "fail", "block", "unblock", "cancel"):
        assert_error(post(operator_api, s1, command), 409, "illegal_transition")
    assert Event.objects.count() == before


def test_complete_goes_to_the_verification_gate_and_a_claim_alone_never_completes(api):
    goal = create_goal(api)
    s1 = task_id(goal, "s1")
    post(api, s1, "start")
    before = Event.objects.count()
    assert_error(post(api, s1, "complete", {"state": "completed"}), 400, "unknown_field", "state")
    assert Event.objects.count() == before
    # No contract registered: the gate refuses (SPEC V3), whatever the answer says.
    decided = post(api, s1, "complete", {"answer": "done, trust me"}).json()
    assert (decided["outcome"], decided["reason"]) == ("failed", "no checks registered")
    assert api.get(f"/api/v1/tasks/{s1}").json()["state"] == "failed"


def test_another_projects_goals_and_tasks_are_404_and_nothing_is_written(api, other_api, other_operator_api):
    goal = create_goal(api)
    s1 = task_id(goal, "s1")
    before = Event.objects.count()
    assert_error(other_api.get(f"/api/v1/goals/{goal['id']}"), 404, "not_found")
    assert_error(other_api.get(f"/api/v1/goals/{s1}"), 404, "not_found")
    assert_error(other_api.get(f"/api/v1/tasks/{s1}"), 404, "not_found")
    assert_error(other_api.get(f"/api/v1/tasks?goal={goal['id']}"), 404, "not_found")
    for command in ("start", "fail", "block", "complete"):
        assert_error(post(other_api, s1, command), 404, "not_found")
    for command in ("start", "fail", "block", "unblock", "cancel", "complete"):
        assert_error(post(other_operator_api, s1, command), 404, "not_found")
    assert other_api.get("/api/v1/goals").json() == {"results": [], "next_cursor": None}
    assert other_api.get("/api/v1/tasks").json() == {"results": [], "next_cursor": None}
    assert_error(api.get("/api/v1/tasks/not-a-uuid"), 404, "not_found")
    assert_error(post(api, "not-a-uuid", "start"), 404, "not_found")
    assert_error(api.get("/api/v1/goals/not-a-uuid"), 404, "not_found")
    assert Event.objects.count() == before
    assert Task.objects.get(id=s1).state == "pending"


def test_an_idempotency_key_makes_retried_posts_write_nothing(api):
    goal = create_goal(api, HTTP_IDEMPOTENCY_KEY="req-1")
    before = Event.objects.count()
    assert create_goal(api, HTTP_IDEMPOTENCY_KEY="req-1") == goal
    assert Event.objects.count() == before
    other = {**PLAN, "objective": "Something else"}
    assert_error(
        api.post("/api/v1/goals", other, format="json", HTTP_IDEMPOTENCY_KEY="req-1"),
        409,
        "idempotency_key_reused",
    )
    s1 = task_id(goal, "s1")
    first = post(api, s1, "start", {"expected_version": 1}, HTTP_IDEMPOTENCY_KEY="req-2").json()
    before = Event.objects.count()
    again = post(api, s1, "start", {"expected_version": 1}, HTTP_IDEMPOTENCY_KEY="req-2")
    assert again.status_code == 200 and again.json() == first
    assert Event.objects.count() == before
    assert_error(post(api, s1, "fail", HTTP_IDEMPOTENCY_KEY="req-2"), 409, "idempotency_key_reused")
    assert Event.objects.count() == before


@pytest.mark.parametrize("key", ["", "   ", "k" * 201], ids=["empty", "blank", "over-200"])
def test_every_api_reads_the_idempotency_key_header_one_way(api, operator_api, key):
    """Tasks, world state, compile, resolver and verification: a blank or over-long key is a 400 naming the
    header, and nothing is written."""
    goal = create_goal(api)
    s1 = task_id(goal, "s1")
    before = Event.objects.count()
    requests = [
        (api, "/api/v1/goals", PLAN),
        (api, f"/api/v1/tasks/{s1}/start", {}),
        (api, f"/api/v1/tasks/{s1}/progress", {"text": "step"}),
        (api, f"/api/v1/tasks/{s1}/compile", {"model": "local"}),
        (operator_api, f"/api/v1/tasks/{s1}/grants", {"sources": {"repo": ["code"]}}),
        (api, f"/api/v1/tasks/{s1}/complete", {"answer": "done"}),
    ]
    for client, url, body in requests:
        response = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
        assert assert_error(response, 400, "invalid", "Idempotency-Key"), url
    assert Event.objects.count() == before


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_start_requests_exactly_one_succeeds(project):
    issued = agent_token_issue(project_id=str(project.id), name="racer", actor="test")
    goal = goal_create(
        project_id=str(project.id), objective="Race", tasks=[{"key": "s1", "objective": "x"}], actor="t"
    )
    s1 = str(Task.objects.get(goal=goal, key="s1").id)
    barrier = threading.Barrier(2)

    def attempt(_: int) -> int:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.key}")
        try:
            barrier.wait()
            return post(client, s1, "start", {"expected_version": 1}).status_code
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=2) as pool:
        statuses = sorted(pool.map(attempt, range(2)))
    assert statuses == [200, 409]
    assert Event.objects.filter(stream_id=f"task-{s1}").count() == 2


def test_the_schema_documents_the_task_endpoints(api):
    schema = api.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    for path in ("/api/v1/goals", "/api/v1/goals/{goal_id}", "/api/v1/tasks", "/api/v1/tasks/{task_id}"):
        assert path in paths
    for command in ("start", "fail", "block", "unblock", "cancel", "complete"):
        assert "post" in paths[f"/api/v1/tasks/{{task_id}}/{command}"]
    assert "TaskSpecRequest" in schema["components"]["schemas"]
    assert "/api/v1/goals/{goal_id}/tasks/{key}" in paths
    assert {p["name"] for p in paths["/api/v1/tasks"]["get"]["parameters"]} == {
        "goal",
        "state",
        "key",
        "limit",
        "cursor",
        "Nexum-Min-Position",  # read-your-writes on a read replica, as on every read
    }


# --- the admin: read-only, no way to complete ------------------------------------------------------------


def test_the_admin_shows_goals_and_tasks_with_their_timeline_read_only(admin_client, api):
    goal = create_goal(api)
    s1 = task_id(goal, "s1")
    post(api, s1, "start", {"reason": "kick-off"})
    page = admin_client.get(f"/admin/tasks_app/task/{s1}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "kick-off" in text and "agent:agent-1" in text and "timeline" in text.lower()
    goal_page = admin_client.get(f"/admin/tasks_app/goal/{goal['id']}/change/")
    assert goal_page.status_code == 200 and "kick-off" in goal_page.content.decode()
    assert admin_client.get("/admin/tasks_app/task/").status_code == 200
    assert admin_client.get("/admin/tasks_app/goal/").status_code == 200
    assert admin_client.get("/admin/tasks_app/task/add/").status_code == 403


def test_the_admin_cannot_complete_or_change_a_task(admin_client, api):
    from django.contrib import admin as django_admin

    goal = create_goal(api)
    s1 = task_id(goal, "s1")
    post(api, s1, "start")
    before = Event.objects.count()
    response = admin_client.post(
        f"/admin/tasks_app/task/{s1}/change/", {"state": "completed", "objective": "x", "risk": "low"}
    )
    assert response.status_code == 403
    response = admin_client.post(f"/admin/tasks_app/task/{s1}/delete/", {"post": "yes"})
    assert response.status_code == 403
    response = admin_client.post(
        "/admin/tasks_app/task/", {"action": "delete_selected", "_selected_action": [s1], "post": "yes"}
    )
    assert Task.objects.get(id=s1).state == "running"
    assert Event.objects.count() == before
    only = {"agenttoken": {"revoke_tokens"}}  # revoking a token: an event through its service
    for model, model_admin in django_admin.site._registry.items():
        if model._meta.app_label == "tasks_app":
            actions = set(model_admin.get_actions(_request(admin_client)))
            assert actions == only.get(model._meta.model_name, set()), model


def _request(admin_client):
    from django.contrib.auth import get_user_model
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.get(username="admin")
    return request


@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
def test_nul_and_lone_surrogates_are_400_never_500(api, bad):
    """Text PostgreSQL cannot store (NUL) or UTF-8 cannot encode is refused; nothing is echoed raw."""
    base = {"objective": "x", "tasks": [{"key": "s1", "objective": "y"}]}
    step = base["tasks"][0]
    bodies = [
        {**base, "objective": bad},
        {**base, "risk": bad},
        {**base, bad: 1},
        {**base, "constraints": [bad]},
        {**base, "tasks": [{**step, "objective": bad}]},
        {**base, "tasks": [{**step, "key": bad}]},
        {**base, "tasks": [{**step, bad: 1}]},
        {**base, "tasks": [{**step, "inputs": [bad]}]},
        {**base, "tasks": [{**step, "depends_on": [bad]}]},
        {**base, "tasks": [{**step, "parent": bad}]},
        {**base, "tasks": [{**step, "risk": bad}]},
    ]
    before = Event.objects.count()
    for body in bodies:
        response = api.post("/api/v1/goals", json.dumps(body), content_type="application/json")
        assert response.status_code == 400, (body, response.content[:300])
    assert Event.objects.count() == before
    s1 = task_id(create_goal(api, base), "s1")
    before = Event.objects.count()
    for body in ({"reason": bad}, {bad: 1}):
        response = api.post(f"/api/v1/tasks/{s1}/start", json.dumps(body), content_type="application/json")
        assert response.status_code == 400, (body, response.content[:300])
    for query in ("state=%ED%A0%80", "goal=%ED%A0%80", "state=%00", "goal=%00"):
        assert api.get(f"/api/v1/tasks?{query}").status_code == 400
    for path in ("/api/v1/tasks/%ED%A0%80", "/api/v1/tasks/%00", "/api/v1/goals/%ED%A0%80"):
        assert api.get(path).status_code == 404
    assert post(api, "%00", "start").status_code == 404
    assert Event.objects.count() == before
