"""Approvals (issue 28 item 4): a task whose contract (or the project's default for high-risk tasks) asks
for a human's yes cannot start or complete until an operator grants it; an agent token never decides one;
an agent may ask before an action of its own and read the answer; every request and decision is an event
on the stream."""

from __future__ import annotations

import hashlib

import pytest

from nexum.eventstore.models import Event
from tests.api.test_event_stream import STREAM, parse, read
from tests.api.test_foundation_api import assert_error

pytestmark = pytest.mark.django_db

SETTINGS = "/api/v1/project/approval-settings"
DIGEST = hashlib.sha256(b'{"environment": "production"}').hexdigest()


def planned(operator_api, *, approval: str | None = None, risk: str = "medium", contract: bool = True) -> str:
    """A goal of one task (its contract asks for ``approval``), planned by the operator; the task's id."""
    body: dict = {"objective": "Ship", "tasks": [{"key": "deploy", "objective": "Deploy", "risk": risk}]}
    if contract:
        spec: dict = {"checks": [], "require_checks": False}
        if approval is not None:
            spec["approval"] = approval
        body["contracts"] = {"deploy": spec}
    answer = operator_api.post("/api/v1/goals", body, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()["tasks"][0]["id"]


def event_count(project) -> int:
    return Event.objects.filter(project_id=project.id).count()


def events_since(project, count: int) -> list[str]:
    """The types of the project's events after its first ``count``, in log order."""
    rows = Event.objects.filter(project_id=project.id).order_by("project_position")
    return list(rows.values_list("event_type", flat=True)[count:])


def decide(client, approval_id: str, decision: str, reason: str = "checked the change"):
    return client.post(
        f"/api/v1/approvals/{approval_id}/decision", {"decision": decision, "reason": reason}, format="json"
    )


def test_a_start_waits_for_an_operator_and_an_agent_can_never_approve(api, operator_api, project):
    task_id = planned(operator_api, approval="before_start")
    before = event_count(project)
    refused = assert_error(
        api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json"), 409, "approval_required"
    )
    approval_id = refused["details"]["approval_id"]
    assert refused["details"]["action"] == "start" and approval_id in refused["message"]
    assert events_since(project, before) == ["ApprovalRequested"]  # the approval it asks for, nothing else
    assert api.get(f"/api/v1/tasks/{task_id}").json()["state"] == "pending"

    again = assert_error(
        api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json"), 409, "approval_required"
    )
    assert again["details"]["approval_id"] == approval_id and event_count(project) == before + 1

    assert_error(decide(api, approval_id, "grant"), 403, "forbidden")
    assert event_count(project) == before + 1
    pending = api.get(f"/api/v1/approvals/{approval_id}").json()
    assert pending["state"] == "pending" and pending["attempt"] == 1 and pending["stage"] == "before_start"
    assert pending["requested_by"] == "agent:agent-1"

    granted = decide(operator_api, approval_id, "grant", "change window is open")
    assert granted.status_code == 200, granted.content
    assert (
        granted.json()["state"] == "granted" and granted.json()["decision_reason"] == "change window is open"
    )
    assert granted.json()["decided_by"] == "operator:operator-1"
    started = api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json")
    assert started.status_code == 200 and started.json()["state"] == "running"
    assert_error(decide(operator_api, approval_id, "deny"), 409, "approval_decided", "approval_id")


def test_a_denied_completion_is_refused_with_the_reason_until_asked_again_and_granted(
    api, operator_api, project
):
    task_id = planned(operator_api, approval="before_complete")
    assert api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").status_code == 200
    complete = f"/api/v1/tasks/{task_id}/complete"
    first = assert_error(api.post(complete, {"answer": "deployed"}, format="json"), 409, "approval_required")
    assert not Event.objects.filter(event_type="CompletionRequested").exists()

    denied = decide(operator_api, first["details"]["approval_id"], "deny", "not on a Friday")
    assert denied.status_code == 200 and denied.json()["state"] == "denied"
    refused = assert_error(api.post(complete, {"answer": "deployed"}, format="json"), 409, "approval_denied")
    assert refused["details"]["reason"] == "not on a Friday" and "not on a Friday" in refused["message"]
    assert not Event.objects.filter(event_type="CompletionRequested").exists()

    asked = api.post(
        f"/api/v1/tasks/{task_id}/approvals",
        {"action": "complete", "reason": "it is Monday now"},
        format="json",
    )
    assert asked.status_code == 201, asked.content
    second_id = asked.json()["id"]
    waiting = assert_error(
        api.post(complete, {"answer": "deployed"}, format="json"), 409, "approval_required"
    )
    assert waiting["details"]["approval_id"] == second_id
    assert decide(operator_api, second_id, "grant").status_code == 200
    done = api.post(complete, {"answer": "deployed"}, format="json")
    assert done.status_code == 200 and done.json()["outcome"] == "completed", done.content


def test_the_projects_default_holds_high_risk_tasks_and_a_contract_may_opt_out(api, operator_api, project):
    assert api.get(SETTINGS).json()["high_risk_approval"] is None
    assert_error(api.put(SETTINGS, {"high_risk_approval": "before_start"}, format="json"), 403, "forbidden")
    assert_error(operator_api.put(SETTINGS, {"high_risk_approval": "later"}, format="json"), 400, "invalid")
    assert not Event.objects.filter(event_type="ProjectHighRiskApprovalSet").exists()
    set_ = operator_api.put(SETTINGS, {"high_risk_approval": "before_start"}, format="json")
    assert set_.status_code == 200 and set_.json()["high_risk_approval"] == "before_start"
    operator_api.put(SETTINGS, {"high_risk_approval": "before_start"}, format="json")
    assert Event.objects.filter(event_type="ProjectHighRiskApprovalSet").count() == 1  # the same again: none

    high = planned(operator_api, risk="high", contract=False)
    assert_error(api.post(f"/api/v1/tasks/{high}/start", {}, format="json"), 409, "approval_required")
    low = planned(operator_api, risk="low", contract=False)
    assert api.post(f"/api/v1/tasks/{low}/start", {}, format="json").status_code == 200
    opted_out = planned(operator_api, risk="high", approval="none")
    assert api.post(f"/api/v1/tasks/{opted_out}/start", {}, format="json").status_code == 200
    own_stage = planned(operator_api, risk="high", approval="before_complete")
    assert api.post(f"/api/v1/tasks/{own_stage}/start", {}, format="json").status_code == 200
    assert api.get(f"/api/v1/tasks/{own_stage}/contract").json()["approval"] == "before_complete"

    cleared = operator_api.put(SETTINGS, {"high_risk_approval": None}, format="json")
    assert cleared.json()["high_risk_approval"] is None


def test_an_agent_asks_before_its_own_action_and_reads_the_answer(api, operator_api, other_api, project):
    task_id = planned(operator_api)
    assert api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").status_code == 200
    url = f"/api/v1/tasks/{task_id}/approvals"
    body = {"action": "deploy", "arguments_digest": DIGEST, "reason": "push build 41 to production"}
    asked = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="deploy-41")
    assert asked.status_code == 201, asked.content
    approval = asked.json()
    assert (approval["state"], approval["action"], approval["arguments_digest"]) == (
        "pending",
        "deploy",
        DIGEST,
    )
    assert approval["stage"] == "" and approval["attempt"] == 1
    retried = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="deploy-41")
    assert retried.status_code == 201 and retried.json()["id"] == approval["id"]
    duplicate = assert_error(api.post(url, body, format="json"), 409, "approval_pending", "action")
    assert duplicate["details"]["approval_id"] == approval["id"]
    assert Event.objects.filter(event_type="ApprovalRequested").count() == 1

    listed = api.get("/api/v1/approvals", {"state": "pending", "task": task_id}).json()["results"]
    assert [row["id"] for row in listed] == [approval["id"]]
    assert_error(other_api.get(f"/api/v1/approvals/{approval['id']}"), 404, "not_found", "approval_id")
    assert api.get("/api/v1/approvals", {"state": "granted"}).json()["results"] == []

    assert decide(operator_api, approval["id"], "grant", "release approved").status_code == 200
    answer = api.get(f"/api/v1/approvals/{approval['id']}").json()
    assert answer["state"] == "granted" and answer["decision_reason"] == "release approved"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "deploy"}, "reason"),
        ({"action": "deploy", "reason": "   "}, "reason"),
        ({"action": "deploy now", "reason": "x"}, "action"),
        ({"action": "deploy", "reason": "x", "arguments_digest": "ABC"}, "arguments_digest"),
        ({"action": "deploy", "reason": "x", "extra": 1}, "extra"),
        ({"action": "start", "reason": "x", "arguments_digest": DIGEST}, "arguments_digest"),
    ],
)
def test_a_bad_request_is_refused_naming_the_member_and_nothing_is_written(api, operator_api, body, field):
    task_id = planned(operator_api, approval="before_start")
    answer = api.post(f"/api/v1/tasks/{task_id}/approvals", body, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["field"] == field
    assert not Event.objects.filter(event_type="ApprovalRequested").exists()


def test_a_gate_action_the_task_does_not_wait_for_and_a_bad_decision_are_refused(api, operator_api, project):
    task_id = planned(operator_api, approval="before_start")
    not_needed = api.post(
        f"/api/v1/tasks/{task_id}/approvals", {"action": "complete", "reason": "please"}, format="json"
    )
    assert_error(not_needed, 409, "illegal_transition", "action")  # a pending task cannot complete yet
    other = planned(operator_api, approval="before_complete")
    not_needed = api.post(
        f"/api/v1/tasks/{other}/approvals", {"action": "start", "reason": "please"}, format="json"
    )
    assert_error(not_needed, 409, "approval_not_required", "action")
    approval_id = assert_error(
        api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json"), 409, "approval_required"
    )["details"]["approval_id"]
    assert_error(decide(operator_api, approval_id, "grant", " "), 400, "invalid", "reason")
    assert_error(decide(operator_api, approval_id, "maybe"), 400, "invalid", "decision")
    assert_error(decide(operator_api, "not-an-id", "grant"), 404, "not_found", "approval_id")
    assert not Event.objects.filter(event_type__in=["ApprovalGranted", "ApprovalDenied"]).exists()


def test_a_retry_asks_again_for_its_own_attempt(api, operator_api, project):
    task_id = planned(operator_api, approval="before_start")
    first = api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").json()["error"]["details"]
    decide(operator_api, first["approval_id"], "grant")
    assert api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").status_code == 200
    assert api.post(f"/api/v1/tasks/{task_id}/fail", {"reason": "flaky"}, format="json").status_code == 200
    retry = assert_error(
        api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json"), 409, "approval_required"
    )
    assert retry["details"]["approval_id"] != first["approval_id"]
    assert api.get(f"/api/v1/approvals/{retry['details']['approval_id']}").json()["attempt"] == 2


def test_each_request_and_decision_is_an_event_on_the_stream(api, operator_api, project):
    task_id = planned(operator_api, approval="before_start")
    head = Event.objects.filter(project_id=project.id).order_by("-project_position").first().project_position
    approval_id = api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").json()["error"]["details"][
        "approval_id"
    ]
    decide(operator_api, approval_id, "grant", "go ahead")
    messages = parse(read(api.get(STREAM, {"timeout": 0, "after": head})))
    assert [message["event"] for message in messages] == ["ApprovalRequested", "ApprovalGranted"]
    assert messages[0]["data"]["data"]["approval_id"] == approval_id
    assert messages[1]["data"]["data"]["reason"] == "go ahead"


def test_the_approvals_page_refuses_a_missing_reason_and_a_decided_approval(
    operator_api, api, client, project
):
    from django.contrib.auth import get_user_model

    staff = get_user_model().objects.create_user(username="lead", password="pw", is_staff=True)
    client.force_login(staff)
    task_id = planned(operator_api, approval="before_start")
    approval_id = api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").json()["error"]["details"][
        "approval_id"
    ]
    decide_url = f"/escalations/approvals/{approval_id}/decide"
    page = client.get("/escalations/approvals/")
    assert page.status_code == 200 and f'data-approval="{approval_id}"' in page.content.decode()

    missing = client.post(decide_url, {"decision": "grant", "reason": ""})
    assert missing.status_code == 400 and "reason" in missing.content.decode()
    assert (
        client.post(
            "/escalations/approvals/not-an-id/decide", {"decision": "grant", "reason": "x"}
        ).status_code
        == 404
    )
    assert not Event.objects.filter(event_type="ApprovalGranted").exists()

    denied = client.post(decide_url, {"decision": "deny", "reason": "freeze week"})
    assert denied.status_code == 302
    assert api.get(f"/api/v1/approvals/{approval_id}").json()["decided_by"] == "human:lead"
    again = client.post(decide_url, {"decision": "grant", "reason": "changed my mind"})
    assert again.status_code == 409 and "already denied" in again.content.decode()


def test_a_blocked_task_unblocked_keeps_its_attempt_and_its_grant(api, operator_api, project):
    task_id = planned(operator_api, approval="before_complete")
    api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json")
    complete = f"/api/v1/tasks/{task_id}/complete"
    approval_id = api.post(complete, {"answer": "ok"}, format="json").json()["error"]["details"][
        "approval_id"
    ]
    assert decide(operator_api, approval_id, "grant").status_code == 200
    assert (
        api.post(f"/api/v1/tasks/{task_id}/block", {"reason": "need a key"}, format="json").status_code == 200
    )
    assert operator_api.post(f"/api/v1/tasks/{task_id}/unblock", {}, format="json").status_code == 200
    done = api.post(complete, {"answer": "ok"}, format="json")
    assert done.status_code == 200 and done.json()["outcome"] == "completed", done.content
