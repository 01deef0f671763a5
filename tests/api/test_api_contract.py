"""One API contract (issue 16): one list shape paged by cursor, declared query parameters only, one strict
input base, tasks by goal and key, a task's compile history. Every refusal is a 4xx in the one error shape
and writes nothing."""

from __future__ import annotations

import pytest

from nexum.adapters.source_policy import HTTP_URL
from nexum.eventstore.models import Event
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
        ("TASK/tool-calls", {"tool": " run_tests", "result_summary": "r"}, "invalid", "tool"),
        ("TASK/tool-calls", {"tool": "run tests", "result_summary": "r"}, "invalid", "tool"),
        ("GOAL/artifacts", {"summary": "s"}, "invalid", "uri"),
        ("GOAL/artifacts", {"summary": "s", "uri": " "}, "invalid", "uri"),
        ("GOAL/artifacts", {"summary": "s", "content_base64": "   "}, "invalid", "content_base64"),
        ("GOAL/artifacts", {"summary": "s", "content_base64": "QUJD\u00a0"}, "invalid", "content_base64"),
        ("GOAL/artifacts", {"summary": "s", "content_base64": "QUJ"}, "invalid", "content_base64"),
    ],
)  # fmt: skip
def test_bad_input_is_400_naming_the_member_and_writes_nothing(api, path, body, code, field):
    goal = create_goal(api)
    path = path.replace("GOAL", f"/api/v1/goals/{goal['id']}").replace(
        "TASK", f"/api/v1/tasks/{task_id(goal, 's1')}"
    )
    before = Event.objects.count()
    assert_error(api.post(path, body, format="json"), 400, code, field)
    assert Event.objects.count() == before


@pytest.mark.parametrize("blank", ["", " ", "\t\n", "\x1c", "\u3000"])
def test_blank_strings_are_what_the_schema_says(api, blank):
    """A required text member must hold a non-whitespace character (the schema's pattern, Python's whitespace
    spelled out); an optional one may be blank. Text is stored trimmed."""
    goal = create_goal(api)
    schema = api.get("/api/schema/?format=json").json()["components"]["schemas"]
    text = schema["FactInputRequest"]["properties"]["text"]
    assert text["minLength"] == 1 and text["pattern"] == NOT_BLANK
    assert "minLength" not in schema["FactInputRequest"]["properties"]["source"]
    before = Event.objects.count()
    assert_error(
        api.post(f"/api/v1/goals/{goal['id']}/facts", {"text": blank}, format="json"), 400, "invalid", "text"
    )
    assert Event.objects.count() == before
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


# --- what schemathesis found: the server now does what the schema says --------------------------------------


def test_an_artifact_takes_base64_wrapped_in_lines_or_empty_and_a_uri_without_content(api):
    goal = create_goal(api)
    url = f"/api/v1/goals/{goal['id']}/artifacts"
    wrapped = api.post(url, {"summary": "s", "content_base64": "QUJD\r\nREVG\n"}, format="json")
    assert wrapped.status_code == 201 and wrapped.json()["content_size"] == 6
    assert api.post(url, {"summary": "s", "content_base64": ""}, format="json").status_code == 201
    assert api.post(url, {"summary": "s", "uri": "file:///x"}, format="json").status_code == 201


def test_a_word_the_catalog_lacks_in_a_compile_is_404_naming_the_model(api, project):
    world = build_auth_world(project, filler=0)
    before = Event.objects.count()
    for body in ({"model": "gpt-unknown"}, {"model": "gpt-unknown", "async": True}):
        answer = api.post(f"/api/v1/tasks/{world.task.id}/compile", body, format="json")
        assert_error(answer, 404, "unknown_model_word", "model")
    assert Event.objects.count() == before


def test_a_cursor_past_a_contexts_excluded_records_is_404(api, project):
    world = build_auth_world(project, filler=3)
    compiled = api.post(f"/api/v1/tasks/{world.task.id}/compile", {"model": "quick"}, format="json").json()
    url = f"/api/v1/contexts/{compiled['context']['digest']}/excluded"
    total = compiled["context"]["exclusions"]["count"]
    assert api.get(url, {"cursor": total}).json()["next_cursor"] is None
    assert_error(api.get(url, {"cursor": total + 1}), 404, "not_found", "cursor")


def test_a_cursor_is_taken_as_given(api):
    create_goal(api)
    assert_error(api.get("/api/v1/goals", {"cursor": "\v"}), 404, "not_found", "cursor")


def test_overriding_the_plan_gate_of_a_task_never_resolved_is_a_conflict(api, operator_api):
    goal = create_goal(api)
    before = Event.objects.count()
    answer = operator_api.post(
        f"/api/v1/tasks/{task_id(goal, 's1')}/plan-gate/override", {"reason": "known"}, format="json"
    )
    assert_error(answer, 409, "conflict", "task_id")
    assert Event.objects.count() == before


@pytest.mark.parametrize(
    ("question", "field"),
    [
        ({"question": "Which port?"}, "questions[0].subjects"),
        ({"question": "Which port?", "subjects": []}, "questions[0].subjects"),
        ({"question": "Which port?", "subjects": [" "]}, "questions[0].subjects[0]"),
        ({"question": "Which port?", "subject": ""}, "questions[0].subject"),
        ({"question": " ", "subjects": ["port"]}, "questions[0].question"),
        ({"question": "Which port?", "subjects": ["port"], "why": "x"}, "questions[0].why"),
    ],
)
def test_a_required_question_names_what_it_is_about(api, operator_api, question, field):
    goal = create_goal(api)
    url = f"/api/v1/tasks/{task_id(goal, 's1')}/questions"
    answer = operator_api.put(url, {"questions": [question]}, format="json")
    assert answer.status_code == 400 and answer.json()["error"]["field"] == field, answer.content
    ok = operator_api.put(url, {"questions": [{"question": "Which port?", "subject": "port"}]}, format="json")
    assert ok.status_code == 200 and ok.json()["questions"][0]["subjects"] == ["port"]


def test_a_grant_names_sources_that_exist(api, operator_api):
    goal = create_goal(api)
    url = f"/api/v1/goals/{goal['id']}/grants"
    assert_error(operator_api.post(url, {"sources": {}}, format="json"), 400, "invalid", "sources")
    for name in ("../etc", "docs\n", "nowhere"):
        assert_error(
            operator_api.post(url, {"sources": {name: []}}, format="json"), 404, "not_found", "sources"
        )


def test_a_source_name_is_the_pattern_whole(operator_api):
    body = {"name": "docs\n", "kind": "docs", "config": {"path": "docs"}}
    assert_error(operator_api.post("/api/v1/sources", body, format="json"), 400, "invalid", "name")


def test_narrowing_to_a_tool_the_registry_lacks_is_404(api, operator_api):
    goal = create_goal(api)
    url = f"/api/v1/goals/{goal['id']}/tools"
    assert_error(
        operator_api.put(url, {"allowed": ["nowhere"]}, format="json"), 404, "not_found", "allowed.0"
    )
    assert_error(operator_api.put(url, {"allowed": [" x"]}, format="json"), 400, "invalid", "allowed[0]")


def test_webhooks_and_their_deliveries_page_as_every_list(operator_api, settings):
    settings.NEXUM_SOURCE_HTTP_ALLOW = ["127.0.0.1:9"]
    created = [
        operator_api.post("/api/v1/webhooks", {"url": f"http://127.0.0.1:9/{n}"}, format="json").json()["id"]
        for n in range(3)
    ]
    first = operator_api.get("/api/v1/webhooks", {"limit": 2}).json()
    rest = operator_api.get("/api/v1/webhooks", {"cursor": first["next_cursor"]}).json()
    assert sorted(hook["id"] for hook in first["results"] + rest["results"]) == sorted(created)
    assert rest["next_cursor"] is None
    deliveries = f"/api/v1/webhooks/{created[0]}/deliveries"
    assert operator_api.get(deliveries, {"limit": 500}).json() == {"results": [], "next_cursor": None}
    assert_error(operator_api.get(deliveries, {"limit": 501}), 400, "invalid", "limit")
    assert_error(operator_api.get(deliveries, {"cursor": 2**63}), 400, "invalid", "cursor")


@pytest.mark.parametrize(
    "url",
    ["http://[", "http://[zz]/", "http://[::1", "http://a:99999/", "ftp://a/", "http://a b/", "http://a/\n"],
)
def test_an_url_that_is_not_an_http_url_is_400_for_a_webhook_and_a_source(operator_api, url):
    before = Event.objects.count()
    assert_error(operator_api.post("/api/v1/webhooks", {"url": url}, format="json"), 400, "invalid", "url")
    source = {"name": "web", "kind": "http_json", "config": {"url": url}}
    assert_error(operator_api.post("/api/v1/sources", source, format="json"), 400, "invalid", "config.url")
    assert Event.objects.count() == before


def test_the_schema_says_what_the_server_checks(api):
    schema = api.get("/api/schema/?format=json").json()
    webhook = schema["components"]["schemas"]["WebhookCreateRequest"]["properties"]["url"]
    assert webhook["pattern"] == HTTP_URL
    stream = schema["paths"]["/api/v1/events/stream"]["get"]["parameters"]
    resume = next(parameter for parameter in stream if parameter["name"] == "Last-Event-ID")
    assert resume["schema"] == {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
    grant = schema["components"]["schemas"]["GrantCreateRequest"]["properties"]["sources"]
    assert grant["minProperties"] == 1 and grant["additionalProperties"]["items"]["pattern"] == NOT_BLANK
