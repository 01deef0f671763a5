"""Who reacts to what: the one table of handlers for the messages that lower layers announce without
importing the layers above them (the messages are in ``tasks_app/hooks.py``). ``WebConfig.ready`` registers
it when Django starts, in every process (web, worker, management command).
"""

from __future__ import annotations

from context_app.resolution.services.plan_gate import plan_gate_check
from nexum.core.verification.approvals import BEFORE_START
from tasks_app import hooks
from tasks_app import selectors as task_selectors
from tasks_app.hooks import GoalContractsGiven, TaskStartDecided, TaskStarting
from verification_app.services import approval_gate, contracts_register_for_goal


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


def check_plan_gate(message: TaskStarting) -> None:
    """The plan gate (SPEC R9) refuses a start while the task's latest bundle leaves an escalation open."""
    plan_gate_check(project_id=message.project_id, task_id=message.task_id)


def check_start_approval(message: TaskStartDecided) -> None:
    """The approval gate (issue 28 item 4) holds a start until an operator grants this attempt's start."""
    task = task_selectors.task_get(project_id=message.project_id, task_id=message.task_id)
    approval_gate(task=task, stage=BEFORE_START, attempt=message.attempt, actor=message.actor)


HANDLERS: dict[type, tuple[hooks.Handler, ...]] = {
    GoalContractsGiven: (register_goal_contracts,),
    TaskStarting: (check_plan_gate,),
    TaskStartDecided: (check_start_approval,),
}


def register_all() -> None:
    for message_type, handlers in HANDLERS.items():
        for handler in handlers:
            hooks.register(message_type, handler)
