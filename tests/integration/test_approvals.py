"""Approvals' read models rebuild from the log like every other, and their events reach the project's
webhooks (issue 28 item 4)."""

from __future__ import annotations

import json

import pytest

from nexum.core.errors import DomainError
from nexum.eventstore import projections
from tasks_app.models import Project, Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start
from tasks_app.services.projects import project_high_risk_approval_set
from tests.api.test_approvals_api import planned
from tests.integration.test_webhooks import dispatch_until_delivered, register
from tests.integration.test_webhooks import receiver as webhook_receiver
from verification_app.models import Contract
from verification_app.services.approvals import approval_decide, approval_request
from verification_app.services.completions import completion_request

receiver = webhook_receiver  # the fixture, by the name the test asks for


def refused_code(call) -> tuple[str, dict]:
    with pytest.raises(DomainError) as refused:
        call()
    return refused.value.code, refused.value.details


@pytest.mark.django_db
def test_rebuilt_approvals_and_the_projects_default_equal_the_live_ones(project):
    project_id = str(project.id)
    project_high_risk_approval_set(
        project_id=project_id, high_risk_approval="before_start", actor="operator:o"
    )
    goal = goal_create(
        project_id=project_id,
        objective="Ship",
        tasks=[{"key": "deploy", "objective": "Deploy", "risk": "high"}],
        contracts={"deploy": {"checks": [], "require_checks": False, "approval": "before_complete"}},
        actor="operator:o",
    )
    task_id = str(Task.objects.get(goal_id=goal.id, key="deploy").id)
    task_start(project_id=project_id, task_id=task_id, actor="agent:a")

    def complete():
        return completion_request(project_id=project_id, task_id=task_id, answer="ok", actor="agent:a")

    code, details = refused_code(complete)
    assert code == "approval_required"
    approval_decide(
        project_id=project_id,
        approval_id=details["approval_id"],
        decision="deny",
        reason="not yet",
        actor="operator:o",
    )
    assert refused_code(complete)[0] == "approval_denied"
    own = approval_request(
        project_id=project_id, task_id=task_id, action="deploy", reason="push it", actor="agent:a"
    )
    approval_decide(
        project_id=project_id, approval_id=str(own.id), decision="grant", reason="fine", actor="operator:o"
    )
    live = projections.snapshot()
    assert len(live["verification_app_approval"]) == 2
    assert Contract.objects.get(task_id=task_id).approval == "before_complete"
    assert Project.objects.get(id=project_id).high_risk_approval == "before_start"
    projections.rebuild()
    assert projections.snapshot() == live


@pytest.mark.django_db(transaction=True)
def test_a_request_and_its_decision_reach_the_projects_webhook_signed(api, operator_api, receiver):
    receiver.secret = register(operator_api, receiver.url)["secret"]
    task_id = planned(operator_api, approval="before_start")
    approval_id = api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").json()["error"]["details"][
        "approval_id"
    ]
    decided = operator_api.post(
        f"/api/v1/approvals/{approval_id}/decision", {"decision": "deny", "reason": "freeze"}, format="json"
    )
    assert decided.status_code == 200
    dispatch_until_delivered()
    events = {
        event["position"]: event for event in (json.loads(r["body"])["event"] for r in receiver.requests)
    }
    delivered = [events[position] for position in sorted(set(receiver.accepted))]
    approvals = [event for event in delivered if event["type"].startswith("Approval")]
    assert [event["type"] for event in approvals] == ["ApprovalRequested", "ApprovalDenied"]
    assert approvals[1]["data"] == {"approval_id": approval_id, "task_id": task_id, "reason": "freeze"}
    assert receiver.bad_signatures == 0
