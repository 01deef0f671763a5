"""One API contract (issue 16): one list shape paged by cursor, declared query parameters only, one strict
input base, tasks by goal and key, a task's compile history. Every refusal is a 4xx in the one error shape
and writes nothing."""

from __future__ import annotations

import pytest

from nexum.eventstore.models import Event as EventRow
from nexum_web.api.strict import NOT_BLANK
from tests.api.test_foundation_api import assert_error
from tests.api.test_task_api import create_goal, task_id
from tests.integration.compile_world import build_auth_world

pytestmark = pytest.mark.django_db

LISTS = [
    "/api/v1/events",
    "/api/v1/goals",
    "/api/v1/tasks",
    "/api/v1/items",
    "/api/v1/tools",
    "/api/v1/sources",
    "/api/v1/escalations",
]


@pytest.mark.parametrize("path", LISTS)
def test_every_list_answers_one_shape(api, path):
    create_goal(api)
    body = api.get(path).json()
    assert set(body) == {"results", "next_cursor"}
    assert isinstance(body["results"], list)


@pytest.mark.parametrize("path", ["/api/v1/goals", "/api/v1/tasks", "/api/v1/items", "/api/v1/events"])
def test_following_next_cursor_visits_every_row_once(api, path):
    for _ in range(3):
        goal = create_goal(api)
        api.post(f"/api/v1/goals/{goal['id']}/facts", {"text": "a fact"}, format="json")
    everything = api.get(path, {"limit": 500}).json()["results"]
    seen, cursor = [], None
    for _ in range(50):
        page = api.get(path, {"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        seen += page["results"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == everything and len(seen) >= 3


def test_a_cursor_the_list_did_not_give_is_404(api):
    create_goal(api)
    for cursor in ("0", "bm90IGpzb24", "WyJ4Il0"):
        assert_error(api.get("/api/v1/goals", {"cursor": cursor}), 404, "not_found", "cursor")


@pytest.mark.parametrize(
    ("path", "query", "code", "field"),
    [
        ("/api/v1/tasks", {"task": "x"}, "unknown_parameter", "task"),
        ("/api/v1/goals", {"offset": "2"}, "unknown_parameter", "offset"),
        ("/api/v1/items", {"after": "2"}, "unknown_parameter", "after"),
        ("/api/v1/health", {}, None, None),
        ("/api/v1/tasks", {"goal": ""}, "invalid", "goal"),
        ("/api/v1/items", {"task": ""}, "invalid", "task"),
        ("/api/v1/escalations", {"task": ""}, "invalid", "task"),
        ("/api/v1/tasks", {"key": ""}, "invalid", "key"),
        ("/api/v1/items", {"own": "yes"}, "invalid", "own"),
        ("/api/v1/items", {"limit": "5.0"}, "invalid", "limit"),
    ],
)
def test_query_parameters_are_declared_ones_and_never_empty(api, path, query, code, field):
    response = api.get(path, query)
    if code is None:
        assert response.status_code == 200
    else:
        assert_error(response, 400, code, field)


def test_a_repeated_parameter_and_a_parameter_on_a_detail_endpoint_are_400(api):
    goal = create_goal(api)
    assert_error(api.get("/api/v1/tasks?state=running&state=failed"), 400, "invalid", "state")
    assert_error(api.get(f"/api/v1/goals/{goal['id']}", {"expand": "1"}), 400, "unknown_parameter", "expand")


def test_tasks_are_addressable_by_goal_and_key_and_filterable_by_key(api, other_api):
    goal = create_goal(api)
    other_goal = create_goal(api)
    by_key = api.get(f"/api/v1/goals/{goal['id']}/tasks/s2")
    assert by_key.status_code == 200
    assert by_key.json() == api.get(f"/api/v1/tasks/{task_id(goal, 's2')}").json()
    assert_error(api.get(f"/api/v1/goals/{goal['id']}/tasks/s9"), 404, "not_found", "key")
    assert_error(other_api.get(f"/api/v1/goals/{goal['id']}/tasks/s2"), 404, "not_found", "goal_id")
    keyed = api.get("/api/v1/tasks", {"key": "s1"}).json()["results"]
    assert [task["id"] for task in keyed] == [task_id(goal, "s1"), task_id(other_goal, "s1")]
    one = api.get("/api/v1/tasks", {"key": "s1", "goal": other_goal["id"]}).json()["results"]
    assert [task["id"] for task in one] == [task_id(other_goal, "s1")]


@pytest.mark.parametrize(
    ("path", "body", "code", "field"),
    [
        ("/api/v1/goals", {"objective": 123, "tasks": [{"key": "a", "objective": "a"}]}, "invalid", "objective"),  # noqa: E501
        ("/api/v1/goals", {"objective": "x", "tasks": [{"key": "a", "objective": 1}]}, "invalid", "tasks[0].objective"),  # noqa: E501
        ("/api/v1/goals", {"objective": "x", "tasks": [], "colour": "red"}, "unknown_field", "colour"),
        ("/api/v1/goals", {"objective": "x", "inputs": ["a", 2], "tasks": []}, "invalid", "inputs[1]"),
        ("GOAL/facts", {"text": "x", "verified": "yes"}, "invalid", "verified"),
        ("GOAL/facts", {"text": "x", "verified": 1}, "invalid", "verified"),
        ("GOAL/facts", {"text": ""}, "invalid", "text"),
        ("GOAL/facts", {"text": 5}, "invalid", "text"),
        ("GOAL/facts", {"text": "x", "source": "s", "extra": 1}, "unknown_field", "extra"),
        ("TASK/failures", {"text": "x", "attempt": "2"}, "invalid", "attempt"),
        ("TASK/failures", {"text": "x", "attempt": 2.5}, "invalid", "attempt"),
        ("TASK/start", {"reason": 7}, "invalid", "reason"),
        ("TASK/start", {"expected_version": "1"}, "invalid", "expected_version"),
        ("TASK/start", {"expected_version": True}, "invalid", "expected_version"),
        ("TASK/complete", {"answer": ["done"]}, "invalid", "answer"),
        ("TASK/compile", {"model": "quick", "overrides": {"window": 5}}, "unknown_field", "overrides.window"),
        ("TASK/compile", {"model": "quick", "async": "false"}, "invalid", "async"),
        ("TASK/resolve", {"async": 0}, "invalid", "async"),
        ("TASK/tool-calls", {"tool": "t", "result_summary": "r", "arguments": {}, "arguments_digest": "0" * 64}, "invalid", "arguments_digest"),  # noqa: E501
    ],
)  # fmt: skip
def test_bad_input_is_400_naming_the_member_and_writes_nothing(api, path, body, code, field):
    goal = create_goal(api)
    path = path.replace("GOAL", f"/api/v1/goals/{goal['id']}").replace(
        "TASK", f"/api/v1/tasks/{task_id(goal, 's1')}"
    )
    before = EventRow.objects.count()
    assert_error(api.post(path, body, format="json"), 400, code, field)
    assert EventRow.objects.count() == before


@pytest.mark.parametrize("blank", ["", " ", "\t\n", "\x1c", "\u3000"])
def test_blank_strings_are_what_the_schema_says(api, blank):
    """A required text member must hold a non-whitespace character (the schema's pattern, Python's whitespace
    spelled out); an optional one may be blank. Text is stored trimmed."""
    goal = create_goal(api)
    schema = api.get("/api/schema/?format=json").json()["components"]["schemas"]
    text = schema["FactInputRequest"]["properties"]["text"]
    assert text["minLength"] == 1 and text["pattern"] == NOT_BLANK
    assert "minLength" not in schema["FactInputRequest"]["properties"]["source"]
    before = EventRow.objects.count()
    assert_error(
        api.post(f"/api/v1/goals/{goal['id']}/facts", {"text": blank}, format="json"), 400, "invalid", "text"
    )
    assert EventRow.objects.count() == before
    fact = api.post(f"/api/v1/goals/{goal['id']}/facts", {"text": " spaced ", "source": blank}, format="json")
    assert fact.status_code == 201 and fact.json()["text"] == "spaced"


def test_a_tasks_compile_history_lists_its_contexts_in_log_order(api, project, other_api):
    world = build_auth_world(project, filler=3)
    url = f"/api/v1/tasks/{world.task.id}/contexts"
    assert api.get(url).json() == {"results": [], "next_cursor": None}
    digests = []
    for model in ("quick", "frontier", "quick"):
        response = api.post(f"/api/v1/tasks/{world.task.id}/compile", {"model": model}, format="json")
        assert response.status_code == 200, response.content
        digests.append(response.json()["context"]["digest"])
    history = api.get(url).json()
    assert [entry["digest"] for entry in history["results"]] == digests
    positions = [entry["compiled_position"] for entry in history["results"]]
    assert positions == sorted(positions)
    first = api.get(url, {"limit": 1}).json()
    assert first["next_cursor"] == str(positions[0])
    rest = api.get(url, {"cursor": first["next_cursor"]}).json()
    assert [entry["digest"] for entry in rest["results"]] == digests[1:]
    assert api.get(f"/api/v1/contexts/{digests[0]}").status_code == 200
    assert_error(other_api.get(url), 404, "not_found", "task_id")


def test_options_answers_without_touching_the_object(operator_api):
    response = operator_api.options("/api/v1/tasks/0/contract")
    assert response.status_code == 200 and "actions" not in response.json()


def test_the_schema_declares_each_operations_errors_in_the_one_shape(api):
    schema = api.get("/api/schema/?format=json").json()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            statuses = set(operation["responses"])
            expected = {"400"} if path == "/api/v1/health" else {"400", "401", "404"}
            assert expected <= statuses, (method, path)
            for status in statuses - {"200", "201", "202", "204"}:
                content = operation["responses"][status]["content"]["application/json"]["schema"]
                assert content == {"$ref": "#/components/schemas/Error"}, (method, path, status)
    item = schema["components"]["schemas"]["Item"]
    assert "content_sha256" not in item["required"] and "verified" not in item["required"]
    questions = schema["components"]["schemas"]["Questions"]["properties"]["updated_at"]
    assert questions.get("nullable") is True
