"""Approvals' read models rebuild from the log like every other (issue 28 item 4)."""

from __future__ import annotations

import pytest

from nexum.core.errors import DomainError
from nexum.eventstore import projections
from tasks_app import services as task_services
from tasks_app.models import Project, Task
from verification_app import services
from verification_app.models import Contract

pytestmark = pytest.mark.django_db


def refused_code(call) -> tuple[str, dict]:
    with pytest.raises(DomainError) as refused:
        call()
    return refused.value.code, refused.value.details


def test_rebuilt_approvals_and_the_projects_default_equal_the_live_ones(project):
    project_id = str(project.id)
    task_services.project_high_risk_approval_set(
        project_id=project_id, high_risk_approval="before_start", actor="operator:o"
    )
    goal = task_services.goal_create(
        project_id=project_id,
        objective="Ship",
        tasks=[{"key": "deploy", "objective": "Deploy", "risk": "high"}],
        contracts={"deploy": {"checks": [], "require_checks": False, "approval": "before_complete"}},
        actor="operator:o",
    )
    task_id = str(Task.objects.get(goal_id=goal.id, key="deploy").id)
    task_services.task_start(project_id=project_id, task_id=task_id, actor="agent:a")

    def complete():
        return services.completion_request(
            project_id=project_id, task_id=task_id, answer="ok", actor="agent:a"
        )

    code, details = refused_code(complete)
    assert code == "approval_required"
    services.approval_decide(
        project_id=project_id,
        approval_id=details["approval_id"],
        decision="deny",
        reason="not yet",
        actor="operator:o",
    )
    assert refused_code(complete)[0] == "approval_denied"
    own = services.approval_request(
        project_id=project_id, task_id=task_id, action="deploy", reason="push it", actor="agent:a"
    )
    services.approval_decide(
        project_id=project_id, approval_id=str(own.id), decision="grant", reason="fine", actor="operator:o"
    )
    live = projections.snapshot()
    assert len(live["verification_app_approval"]) == 2
    assert Contract.objects.get(task_id=task_id).approval == "before_complete"
    assert Project.objects.get(id=project_id).high_risk_approval == "before_start"
    projections.rebuild()
    assert projections.snapshot() == live
