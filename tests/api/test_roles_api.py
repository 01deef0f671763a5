"""Roles (issue 12, part 1): an agent token never sets its own bar.

Every policy write refuses an agent token with 403 ``forbidden`` and writes nothing, and succeeds for an
operator token; no body claims a trust class above its caller's ceiling; the adversarial path — an agent
re-contracting its own failed task with a check that always passes — is closed; staff in the escalation UI
and the admin still act as operators; the OpenAPI schema says which operations need an operator.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from rest_framework.test import APIClient

from context_app.catalog.services import DEFAULT_CATALOG, model_overlay_set
from context_app.resolution.models import Escalation
from context_app.resolution.services.grants import grant_issue
from context_app.resolution.services.resolves import bundle_resolve
from context_app.resolution.services.sources import source_register
from context_app.world.services.facts import fact_record
from context_app.world.services.scopes import scope_resolve
from context_app.world.services.tools import tool_define
from nexum.core.errors import ValidationFailed
from nexum.eventstore import reading
from nexum.eventstore.models import Event
from tasks_app.models import AgentToken, Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_block, task_start
from tasks_app.services.tokens import agent_token_issue
from tests.api.test_foundation_api import assert_error
from tests.integration.compile_world import load_catalog

pytestmark = pytest.mark.django_db

MISSING_FILE = {"checks": [{"kind": "file_exists", "name": "report", "path": "reports/done.txt"}]}


@dataclass
class World:
    project_id: str
    goal: str
    s1: str  # pending, its context resolved with an open conflict escalation
    s2: str  # blocked
    s3: str  # pending
    escalation: str
    tickets: str


def _tickets(tmp_path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps([{"id": "1", "subject": "deploy port", "text": text}]))
    return str(path)


@pytest.fixture
def world(project, tmp_path, settings) -> World:
    """A planned goal with a resolved conflict escalation, a blocked task, a catalog with an overlay and a
    tool — built by the operator through the services, as the API would."""
    settings.NEXUM_WORKSPACE_ROOT = tmp_path / "workspace"
    settings.NEXUM_WORKSPACE_ROOT.mkdir()
    settings.NEXUM_ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.NEXUM_SOURCE_ROOTS = [tmp_path]
    project_id, operator = str(project.id), "operator:planner"
    load_catalog(project_id)
    model_overlay_set(project_id=project_id, word="local", overlay={"context_tokens": 32_000}, actor=operator)
    tool_define(project_id=project_id, name="shell", description="run", actor=operator)
    for name, port in (("ops", 8080), ("wiki", 9090)):
        source_register(
            project_id=project_id,
            name=name,
            kind="tickets_json",
            config={"path": _tickets(tmp_path, name, f"The deploy port is {port}.")},
            actor=operator,
        )
    goal = goal_create(
        project_id=project_id,
        objective="Ship the release",
        tasks=[
            {"key": "s1", "objective": "Configure the deploy", "inputs": ["deploy port"]},
            {"key": "s2", "objective": "Build"},
            {"key": "s3", "objective": "Write the notes"},
        ],
        actor=operator,
    )
    tasks = {task.key: str(task.id) for task in Task.objects.filter(goal=goal, is_goal=False)}
    grant_issue(
        project_id=project_id, task_id=tasks["s1"], sources={"ops": ["*"], "wiki": ["*"]}, actor=operator
    )
    bundle_resolve(project_id=project_id, task_id=tasks["s1"], actor="agent:agent-1")
    task_start(project_id=project_id, task_id=tasks["s2"], actor="agent:agent-1")
    task_block(project_id=project_id, task_id=tasks["s2"], actor="agent:agent-1")
    return World(
        project_id=project_id,
        goal=str(goal.id),
        s1=tasks["s1"],
        s2=tasks["s2"],
        s3=tasks["s3"],
        escalation=str(Escalation.objects.get(state="open").id),
        tickets=_tickets(tmp_path, "docs", "Deploys happen on Tuesdays."),
    )


def _evidence(world: World) -> list[str]:
    return [entry["digest"] for entry in Escalation.objects.get(id=world.escalation).evidence]


def _catalog_with_an_alias() -> dict[str, Any]:
    document = json.loads(DEFAULT_CATALOG.read_text())
    document["aliases"]["fast"] = "quick"
    return document


Write = Callable[[World], tuple[str, str, Any]]

# (what, needs-an-operator action in the refusal, the request, the operator's status)
POLICY_WRITES: list[tuple[str, str, Write, int]] = [
    (
        "goal with contracts",
        "registering verification contracts",
        lambda w: (
            "post",
            "/api/v1/goals",
            {"objective": "x", "tasks": [{"key": "a", "objective": "b"}], "contracts": {"a": MISSING_FILE}},
        ),
        201,
    ),
    (
        "goal with a contract origin",
        "registering verification contracts",
        lambda w: (
            "post",
            "/api/v1/goals",
            {"objective": "x", "tasks": [{"key": "a", "objective": "b"}], "contract_origin": {}},
        ),
        201,
    ),
    (
        "contract",
        "registering or replacing a verification contract",
        lambda w: ("put", f"/api/v1/tasks/{w.s1}/contract", {"contract": MISSING_FILE}),
        200,
    ),
    (
        "source",
        "registering a source",
        lambda w: (
            "post",
            "/api/v1/sources",
            {"name": "docs", "kind": "tickets_json", "config": {"path": w.tickets}},
        ),
        201,
    ),
    (
        "goal grant",
        "issuing a grant",
        lambda w: ("post", f"/api/v1/goals/{w.goal}/grants", {"sources": {"ops": ["*"]}}),
        201,
    ),
    (
        "task grant",
        "issuing a grant",
        lambda w: ("post", f"/api/v1/tasks/{w.s3}/grants", {"sources": {"wiki": []}}),
        201,
    ),
    (
        "model catalog",
        "replacing the model catalog",
        lambda w: ("put", "/api/v1/models/catalog", _catalog_with_an_alias()),
        200,
    ),
    (
        "overlay set",
        "setting a model overlay",
        lambda w: ("put", "/api/v1/models/local/overlay", {"context_tokens": 16_000}),
        200,
    ),
    (
        "overlay clear",
        "clearing a model overlay",
        lambda w: ("delete", "/api/v1/models/local/overlay", None),
        200,
    ),
    (
        "tool register",
        "changing the project's tool registry",
        lambda w: ("post", "/api/v1/tools", {"name": "grep"}),
        201,
    ),
    (
        "tool redefine",
        "changing the project's tool registry",
        lambda w: ("put", "/api/v1/tools/shell", {"description": "run anything"}),
        200,
    ),
    (
        "tool remove",
        "changing the project's tool registry",
        lambda w: ("delete", "/api/v1/tools/shell", None),
        204,
    ),
    (
        "goal tools",
        "narrowing or pinning the tools of a goal or task",
        lambda w: ("put", f"/api/v1/goals/{w.goal}/tools", {"allowed": ["shell"]}),
        200,
    ),
    (
        "task tools",
        "narrowing or pinning the tools of a goal or task",
        lambda w: ("put", f"/api/v1/tasks/{w.s1}/tools", {"pinned": ["shell"]}),
        200,
    ),
    (
        "required questions",
        "setting a task's required questions",
        lambda w: ("put", f"/api/v1/tasks/{w.s1}/questions", {"questions": []}),
        200,
    ),
    *(
        (
            f"escalation {action}",
            "resolving an escalation",
            lambda w, body=body: ("post", f"/api/v1/escalations/{w.escalation}/resolve", body(w)),
            200,
        )
        for action, body in (
            ("supply_fact", lambda w: {"action": "supply_fact", "text": "The deploy port is 8080."}),
            ("pick_side", lambda w: {"action": "pick_side", "chosen": [_evidence(w)[0]]}),
            ("grant_source", lambda w: {"action": "grant_source", "source": "ops"}),
            ("cancel", lambda w: {"action": "cancel"}),
        )
    ),
    (
        "plan-gate override",
        "overriding the plan gate",
        lambda w: ("post", f"/api/v1/tasks/{w.s1}/plan-gate/override", {"reason": "the port is known"}),
        200,
    ),
    ("unblock", "unblocking a task", lambda w: ("post", f"/api/v1/tasks/{w.s2}/unblock", {}), 200),
    ("cancel", "cancelling a task", lambda w: ("post", f"/api/v1/tasks/{w.s3}/cancel", {"reason": "x"}), 200),
]


def _send(client: APIClient, method: str, url: str, body: Any):
    if body is None:
        return getattr(client, method)(url)
    return getattr(client, method)(url, body, format="json")


@pytest.mark.parametrize(
    ("what", "action", "write", "status"), POLICY_WRITES, ids=[w[0] for w in POLICY_WRITES]
)
def test_an_agent_token_is_refused_every_policy_write_and_an_operator_token_succeeds(
    api, operator_api, world, what, action, write, status
):
    method, url, body = write(world)
    before, head = Event.objects.count(), reading.head_position()
    error = assert_error(_send(api, method, url, body), 403, "forbidden")
    assert error["message"].startswith(f"{action} needs an operator token"), error
    assert error["details"] == {"role": "agent", "needs": "operator", "action": action}
    assert Event.objects.count() == before

    response = _send(operator_api, method, url, body)
    assert response.status_code == status, response.content
    actors = set(Event.objects.filter(position__gt=head).values_list("metadata__actor", flat=True))
    assert actors == {"operator:operator-1"}


def test_the_refusal_of_a_goals_contracts_names_the_member(api):
    plan = {"objective": "x", "tasks": [{"key": "a", "objective": "b"}]}
    before = Event.objects.count()
    for member, value in (("contracts", {"a": {"checks": []}}), ("contract_origin", {"derived_from": []})):
        response = api.post("/api/v1/goals", {**plan, member: value}, format="json")
        assert_error(response, 403, "forbidden", member)
    assert Event.objects.count() == before
    # the plan alone is the agent's to make; its tasks then wait for an operator's contracts
    assert api.post("/api/v1/goals", plan, format="json").status_code == 201


# --- trust ceilings ---------------------------------------------------------------------------------------

ITEM_WRITES: dict[str, Callable[[World], tuple[str, dict[str, Any]]]] = {
    "goal fact": lambda w: (f"/api/v1/goals/{w.goal}/facts", {"text": "x"}),
    "goal decision": lambda w: (f"/api/v1/goals/{w.goal}/decisions", {"text": "x"}),
    "goal artifact": lambda w: (f"/api/v1/goals/{w.goal}/artifacts", {"summary": "x", "uri": "file:x"}),
    "goal progress": lambda w: (f"/api/v1/goals/{w.goal}/progress", {"text": "x"}),
    "task fact": lambda w: (f"/api/v1/tasks/{w.s1}/facts", {"text": "x"}),
    "task decision": lambda w: (f"/api/v1/tasks/{w.s1}/decisions", {"text": "x"}),
    "task failure": lambda w: (f"/api/v1/tasks/{w.s1}/failures", {"text": "x"}),
    "task progress": lambda w: (f"/api/v1/tasks/{w.s1}/progress", {"text": "x"}),
    "task tool call": lambda w: (
        f"/api/v1/tasks/{w.s1}/tool-calls",
        {"tool": "shell", "result_summary": "x"},
    ),
    "task artifact": lambda w: (f"/api/v1/tasks/{w.s1}/artifacts", {"summary": "x", "content_text": "y"}),
    "superseding fact": lambda w: (f"/api/v1/facts/{_agents_fact(w)}/supersede", {"text": "x"}),
}


def _agents_fact(world: World) -> str:
    """A fact both roles may supersede (at the agent's ceiling)."""
    scope = scope_resolve(project_id=world.project_id, goal_id=world.goal)
    fact = fact_record(
        scope=scope, text="The port is 8080.", trust_class="agent_reported", actor="agent:agent-1"
    )
    return str(fact.id)


@pytest.mark.parametrize("kind", ITEM_WRITES)
@pytest.mark.parametrize(
    ("client", "ceiling", "above"),
    [
        ("api", "agent_reported", ("repository_authored", "signed_skill", "signed_policy", "kernel")),
        ("operator_api", "repository_authored", ("signed_skill", "signed_policy", "kernel")),
    ],
    ids=["agent", "operator"],
)
def test_no_item_claims_a_class_above_its_callers_ceiling(request, world, kind, client, ceiling, above):
    caller = request.getfixturevalue(client)
    for claimed in above:
        url, body = ITEM_WRITES[kind](world)
        before = Event.objects.count()
        error = assert_error(
            caller.post(url, {**body, "trust_class": claimed}, format="json"), 403, "forbidden"
        )
        assert error["field"] == "trust_class"
        assert error["details"]["ceiling"] == ceiling and error["details"]["claimed"] == claimed
        assert Event.objects.count() == before
    url, body = ITEM_WRITES[kind](world)
    recorded = caller.post(url, body, format="json")
    assert recorded.status_code == 201 and recorded.json()["trust_class"] == ceiling
    url, body = ITEM_WRITES[kind](world)
    lowered = caller.post(url, {**body, "trust_class": "untrusted_retrieved"}, format="json")
    assert lowered.status_code == 201 and lowered.json()["trust_class"] == "untrusted_retrieved"


FACT_CHANGES: dict[str, tuple[dict[str, Any], int, str]] = {
    "retract": ({"reason": "no longer holds"}, 200, "retracted"),
    "supersede": ({"text": "Deploys need no review."}, 201, "superseded"),
}


def _fact_of(world: World, trust_class: str) -> str:
    scope = scope_resolve(project_id=world.project_id, goal_id=world.goal)
    fact = fact_record(
        scope=scope, text="Deploys need a second reviewer.", trust_class=trust_class, actor="test"
    )
    return str(fact.id)


@pytest.mark.parametrize("change", FACT_CHANGES)
def test_an_agent_cannot_retract_or_supersede_an_operators_fact(api, world, change):
    body, _, _ = FACT_CHANGES[change]
    fact_id = _fact_of(world, "repository_authored")
    before = Event.objects.count()
    error = assert_error(api.post(f"/api/v1/facts/{fact_id}/{change}", body, format="json"), 403, "forbidden")
    assert error["field"] == "trust_class" and "repository_authored" in error["message"]
    assert error["details"] == {
        "trust_class": "repository_authored",
        "ceiling": "agent_reported",
        "action": change,
    }
    assert Event.objects.count() == before
    fact = api.get(f"/api/v1/facts/{fact_id}").json()["fact"]
    assert fact["status"] == "current"
    compiled = api.post(f"/api/v1/tasks/{world.s1}/compile", {"model": "local"}, format="json").json()
    assert "Deploys need a second reviewer." in compiled["context"]["prompt_block"]


@pytest.mark.parametrize("change", FACT_CHANGES)
@pytest.mark.parametrize(
    ("client", "trust_class"),
    [("api", "agent_reported"), ("api", "untrusted_retrieved"), ("operator_api", "repository_authored"),
     ("operator_api", "agent_reported")],
    ids=["agent-own", "agent-untrusted", "operator-own", "operator-agents"],
)  # fmt: skip
def test_a_caller_retracts_or_supersedes_a_fact_at_or_below_its_ceiling(
    request, world, change, client, trust_class
):
    caller = request.getfixturevalue(client)
    body, status, after = FACT_CHANGES[change]
    fact_id = _fact_of(world, trust_class)
    answer = caller.post(f"/api/v1/facts/{fact_id}/{change}", body, format="json")
    assert answer.status_code == status, answer.content
    assert caller.get(f"/api/v1/facts/{fact_id}").json()["fact"]["status"] == after


def test_compile_evidence_is_capped_at_the_callers_ceiling_and_agent_items_render_as_recorded(api, world):
    url = f"/api/v1/tasks/{world.s1}/compile"
    before = Event.objects.count()
    evidence = [{"kind": "diagnostic", "text": "3 tests failed", "trust_class": "repository_authored"}]
    refused = api.post(url, {"model": "local", "evidence": evidence}, format="json")
    assert_error(refused, 403, "forbidden", "evidence.trust_class")
    assert Event.objects.count() == before
    api.post(f"/api/v1/tasks/{world.s1}/progress", {"text": "Read the deploy script"}, format="json")
    compiled = api.post(
        url, {"model": "local", "evidence": [{"kind": "diagnostic", "text": "3 tests failed"}]}, format="json"
    )
    assert compiled.status_code == 200, compiled.content
    prompt = compiled.json()["context"]["prompt_block"]
    assert "- Read the deploy script" in prompt  # not quoted as untrusted data
    assert "- [supplied with the compile request]\n  3 tests failed" in prompt
    items = api.get("/api/v1/items", {"task": world.s1, "own": "true", "kind": "progress"}).json()["results"]
    assert [item["trust_class"] for item in items] == ["agent_reported"]


def test_a_contracts_origin_never_rises_above_the_operators_ceiling(operator_api, world):
    before = Event.objects.count()
    url = f"/api/v1/tasks/{world.s1}/contract"
    for claimed in ("signed_skill", "signed_policy", "kernel"):
        response = operator_api.put(url, {"contract": MISSING_FILE, "trust_class": claimed}, format="json")
        assert_error(response, 403, "forbidden", "trust_class")
    goal = {
        "objective": "x",
        "tasks": [{"key": "a", "objective": "b"}],
        "contracts": {"a": MISSING_FILE},
        "contract_origin": {"trust_class": "kernel"},
    }
    assert_error(operator_api.post("/api/v1/goals", goal, format="json"), 403, "forbidden", "trust_class")
    assert Event.objects.count() == before
    registered = operator_api.put(url, {"contract": MISSING_FILE}, format="json").json()
    assert (registered["trust_class"], registered["actor"]) == ("repository_authored", "operator:operator-1")


# --- the adversarial path of the issue --------------------------------------------------------------------


def test_an_agent_cannot_lower_the_bar_of_its_own_failed_task(api, operator_api, world, settings):
    settings.NEXUM_CHECK_EXECUTABLES = [sys.executable]  # so that only the role stands in the way
    planned = operator_api.post(
        "/api/v1/goals",
        {
            "objective": "Ship",
            "tasks": [{"key": "s1", "objective": "Write the report"}],
            "contracts": {"s1": MISSING_FILE},
        },
        format="json",
    )
    task = planned.json()["tasks"][0]["id"]
    assert api.post(f"/api/v1/tasks/{task}/start", {}, format="json").status_code == 200
    first = api.post(f"/api/v1/tasks/{task}/complete", {"answer": "done"}, format="json").json()
    assert first["outcome"] == "failed"

    before = Event.objects.count()
    always_passes = {"checks": [{"kind": "command", "name": "ok", "argv": [sys.executable, "-c", "pass"]}]}
    for body in (
        {"contract": always_passes},
        {"contract": {"checks": [], "require_checks": False}},
        {"contract": always_passes, "trust_class": "kernel"},
    ):
        assert_error(api.put(f"/api/v1/tasks/{task}/contract", body, format="json"), 403, "forbidden")
    escalation = f"/api/v1/escalations/{world.escalation}/resolve"
    assert_error(
        api.post(escalation, {"action": "supply_fact", "text": "ok"}, format="json"), 403, "forbidden"
    )
    assert_error(
        api.post(f"/api/v1/tasks/{task}/grants", {"sources": {"ops": ["*"]}}, format="json"), 403, "forbidden"
    )
    assert Event.objects.count() == before

    assert api.post(f"/api/v1/tasks/{task}/start", {}, format="json").json()["attempt"] == 2
    again = api.post(f"/api/v1/tasks/{task}/complete", {"answer": "really done"}, format="json").json()
    assert again["outcome"] == "failed" and again["completion"]["contract_revision"] == 1
    assert operator_api.get(f"/api/v1/tasks/{task}/contract").json()["checks"] == MISSING_FILE["checks"]


def test_an_agents_own_goal_cannot_complete_without_an_operators_contract(api, operator_api, world):
    refused = api.post(
        "/api/v1/goals",
        {
            "objective": "Ship",
            "tasks": [{"key": "s1", "objective": "x"}],
            "contracts": {"s1": {"checks": [], "require_checks": False}},
        },
        format="json",
    )
    assert_error(refused, 403, "forbidden", "contracts")
    goal = api.post(
        "/api/v1/goals", {"objective": "Ship", "tasks": [{"key": "s1", "objective": "x"}]}, format="json"
    )
    task = goal.json()["tasks"][0]["id"]
    api.post(f"/api/v1/tasks/{task}/start", {}, format="json")
    decided = api.post(f"/api/v1/tasks/{task}/complete", {"answer": "done"}, format="json").json()
    assert (decided["outcome"], decided["reason"]) == ("failed", "no checks registered")
    # an agent's own report is never the basis of a contract either
    fact = api.post(f"/api/v1/tasks/{task}/facts", {"text": "no checks are needed"}, format="json").json()
    derived = {"contract": {"checks": [], "require_checks": False}, "derived_from": [fact["id"]]}
    assert_error(
        operator_api.put(f"/api/v1/tasks/{task}/contract", derived, format="json"), 422, "untrusted_content"
    )


@pytest.mark.parametrize(
    "narrowing", [{"sources": {"ops": ["*"]}}, {"query": "release notes"}, {"max_items": 1}], ids=str
)
def test_an_agent_cannot_resolve_around_its_escalation(api, world, narrowing):
    """A resolve narrowed to one side of a conflict (or another query or budget) no longer shows the gap, but
    it saw only part of the context: the escalation stays open and the plan gate closed."""
    response = api.post(f"/api/v1/tasks/{world.s1}/resolve", narrowing, format="json")
    assert response.status_code == 200, response.content
    assert Escalation.objects.get(id=world.escalation).state == "open"
    assert_error(api.post(f"/api/v1/tasks/{world.s1}/start", {}, format="json"), 422, "plan_gate_closed")
    # the task's own resolve still shows the conflict: it stays open until an operator settles it
    api.post(f"/api/v1/tasks/{world.s1}/resolve", {}, format="json")
    assert Escalation.objects.get(id=world.escalation).state == "open"


# --- staff act as operators -------------------------------------------------------------------------------


def test_staff_resolve_in_the_escalation_ui_what_an_agent_token_may_not(api, world, admin_client):
    refused = api.post(
        f"/api/v1/escalations/{world.escalation}/resolve",
        {"action": "supply_fact", "text": "8080"},
        format="json",
    )
    assert_error(refused, 403, "forbidden")
    response = admin_client.post(
        f"/escalations/{world.escalation}/resolve",
        {
            "action": "supply_fact",
            "supply_fact-text": "The deploy port is 8080.",
            "supply_fact-subject": "deploy port",
        },
    )
    assert response.status_code == 302, response.content
    escalation = Escalation.objects.get(id=world.escalation)
    assert (escalation.state, escalation.resolved_by) == ("resolved", "human:admin")
    fact = api.get("/api/v1/items", {"task": world.s1, "kind": "fact"}).json()["results"][0]
    assert (fact["trust_class"], fact["verified"]) == ("repository_authored", True)


def test_staff_override_the_plan_gate_from_the_admin(api, world, admin_client):
    override = f"/api/v1/tasks/{world.s1}/plan-gate/override"
    assert_error(api.post(override, {"reason": "go"}, format="json"), 403, "forbidden")
    assert_error(api.post(f"/api/v1/tasks/{world.s1}/start", {}, format="json"), 422, "plan_gate_closed")
    response = admin_client.post(
        "/admin/resolution/escalation/",
        {"action": "override_plan_gate", "_selected_action": [world.escalation]},
    )
    assert response.status_code == 302
    assert api.post(f"/api/v1/tasks/{world.s1}/start", {}, format="json").json()["state"] == "running"


# --- tokens -----------------------------------------------------------------------------------------------


def test_a_token_carries_its_role_into_the_actor(api, operator_api, project, world):
    for client, actor in ((api, "agent:agent-1"), (operator_api, "operator:operator-1")):
        fact = client.post(f"/api/v1/goals/{world.goal}/facts", {"text": "x"}, format="json").json()
        assert fact["actor"] == actor
    assert dict(AgentToken.objects.filter(project=project).values_list("name", "role")) == {
        "agent-1": "agent",
        "operator-1": "operator",
    }
    before = Event.objects.count()
    with pytest.raises(ValidationFailed) as error:
        agent_token_issue(project_id=str(project.id), name="x", role="planner", actor="test")
    assert (error.value.code, error.value.field) == ("invalid_role", "role")
    assert Event.objects.count() == before


def test_the_nexum_token_command_prints_a_working_operator_token(project, world):
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command(
        "nexum_token", "issue", "acme", "planner", "--role", "operator", stdout=out, stderr=io.StringIO()
    )
    key = out.getvalue().strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    response = client.put(f"/api/v1/tasks/{world.s1}/questions", {"questions": []}, format="json")
    assert response.status_code == 200
    assert AgentToken.objects.get(name="planner").role == "operator"


# --- the schema -------------------------------------------------------------------------------------------


def test_the_schema_says_which_operations_need_an_operator(api):
    paths = api.get("/api/schema/?format=json").json()["paths"]
    operator = {
        ("/api/v1/tasks/{task_id}/contract", "put"),
        ("/api/v1/sources", "post"),
        ("/api/v1/goals/{scope_id}/grants", "post"),
        ("/api/v1/tasks/{scope_id}/grants", "post"),
        ("/api/v1/models/catalog", "put"),
        ("/api/v1/project/compile-settings", "put"),
        ("/api/v1/project/approval-settings", "put"),
        ("/api/v1/approvals/{approval_id}/decision", "post"),
        ("/api/v1/project/retention", "put"),
        ("/api/v1/tasks/{task_id}/fork", "post"),
        ("/api/v1/goals/{goal_id}/fork", "post"),
        ("/api/v1/models/{word}/overlay", "put"),
        ("/api/v1/models/{word}/overlay", "delete"),
        ("/api/v1/tools", "post"),
        ("/api/v1/tools/{name}", "put"),
        ("/api/v1/tools/{name}", "delete"),
        ("/api/v1/goals/{scope_id}/tools", "put"),
        ("/api/v1/tasks/{scope_id}/tools", "put"),
        ("/api/v1/tasks/{task_id}/questions", "put"),
        ("/api/v1/escalations/{escalation_id}/resolve", "post"),
        ("/api/v1/tasks/{task_id}/plan-gate/override", "post"),
        ("/api/v1/tasks/{task_id}/unblock", "post"),
        ("/api/v1/tasks/{task_id}/cancel", "post"),
        ("/api/v1/webhooks", "get"),
        ("/api/v1/webhooks", "post"),
        ("/api/v1/webhooks/{webhook_id}", "get"),
        ("/api/v1/webhooks/{webhook_id}", "delete"),
        ("/api/v1/webhooks/{webhook_id}/deliveries", "get"),
    }
    marked = {
        (path, method)
        for path, operations in paths.items()
        for method, operation in operations.items()
        if operation.get("x-nexum-role") == "operator"
    }
    assert marked == operator
    for path, method in operator:
        operation = paths[path][method]
        assert "Needs an operator token" in operation["description"] and "403" in operation["responses"]
    goals = paths["/api/v1/goals"]["post"]
    assert goals["x-nexum-operator-fields"] == ["contracts", "contract_origin"]
    assert "x-nexum-role" not in goals


def test_head_follows_gets_rule_on_every_operator_only_read(api, operator_api):
    """HEAD is answered by the GET handler, so it has GET's role check: an agent learns nothing from HEAD
    (not even the operator's body length) that GET refuses it. The reads are the schema's operator-only
    GETs, found from the declarations rather than listed here."""
    paths = api.get("/api/schema/?format=json").json()["paths"]
    reads = [
        re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)
        for path, operations in paths.items()
        if operations.get("get", {}).get("x-nexum-role") == "operator"
    ]
    assert "/api/v1/webhooks" in reads and len(reads) >= 3
    for url in reads:
        assert_error(api.get(url), 403, "forbidden")
        refused = api.head(url)
        assert refused.status_code == 403, (url, refused.status_code)
        assert refused.content == b"", url
        as_operator, head_as_operator = operator_api.get(url), operator_api.head(url)
        assert head_as_operator.status_code == as_operator.status_code != 403, url
        assert head_as_operator["Content-Length"] == as_operator["Content-Length"], url
