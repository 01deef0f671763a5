"""The handlers of the messages the task graph announces without importing the layers above it (the messages
are in ``tasks_app/hooks.py``): each hands the message to the service that answers it. Who reacts to what is
``config.bootstrap.MESSAGE_HANDLERS``, wired when Django is ready, in every process."""

from __future__ import annotations

from context_app.resolution.selectors import plan_gate_guard
from nexum.core.verification.approvals import BEFORE_START
from tasks_app import selectors as task_selectors
from tasks_app.hooks import GoalContractsGiven, TaskStartDecided, TaskStarting
from verification_app.services.approvals import approval_gate
from verification_app.services.contracts import contracts_register_for_goal


def register_goal_contracts(message: GoalContractsGiven) -> None:
    """The verification gate registers each task's contract (SPEC V8)."""
    contracts_register_for_goal(
        project_id=message.project_id,
        task_ids=message.task_ids,
        contracts=message.contracts,
        origin=message.origin,
        actor=message.actor,
        idempotency_key=message.idempotency_key,
    )


def guard_plan_gate(message: TaskStarting) -> None:
    """The plan gate (SPEC R9) refuses a start while the task's latest bundle leaves an escalation open."""
    plan_gate_guard(project_id=message.project_id, task_id=message.task_id)


def guard_start_approval(message: TaskStartDecided) -> None:
    """The approval gate (issue 28 item 4) holds a start until an operator grants this attempt's start."""
    task = task_selectors.task_get(project_id=message.project_id, task_id=message.task_id)
    approval_gate(task=task, stage=BEFORE_START, attempt=message.attempt, actor=message.actor)
