"""Approvals (issue 28 item 4): a human's yes before a task's start or completion, which the gate asks for and
refuses without, and an agent's request before an action of its own; operators decide them."""

from __future__ import annotations

import contextlib
import uuid

from nexum.core.errors import (
    ConcurrencyError,
    IllegalTransition,
    ValidationFailed,
)
from nexum.core.ids import AGENT_APPROVAL_IDS
from nexum.core.tasks.lifecycle import ALLOWED_FROM
from nexum.core.verification.approvals import (
    BEFORE_COMPLETE,
    BEFORE_START,
    DENY,
    GATE_ACTIONS,
    GRANT,
    PENDING,
    ApprovalDecided,
    ApprovalDenied,
    ApprovalGranted,
    ApprovalNotRequired,
    ApprovalPending,
    ApprovalRequested,
    ApprovalView,
    approval_stream,
    decide_gate,
    gate_approval_id,
    required_stages,
    validate_action,
    validate_arguments_digest,
    validate_decision_reason,
)
from nexum.eventstore import store
from tasks_app import selectors as task_selectors
from tasks_app.models import Project, Task
from verification_app import selectors
from verification_app.models import Approval, Contract

_STAGE_OF_ACTION = {action: stage for stage, action in GATE_ACTIONS.items()}


def approval_stages(*, task: Task) -> set[str]:
    """The stages at which ``task`` waits for an operator: its contract's ``approval``, else the project's
    default when the task's risk is high."""
    contract_approval = Contract.objects.filter(task_id=task.id).values_list("approval", flat=True).first()
    default = Project.objects.filter(id=task.project_id).values_list("high_risk_approval", flat=True).first()
    return required_stages(contract_approval=contract_approval, risk=task.risk, high_risk_default=default)


def approval_gate(*, task: Task, stage: str, attempt: int, actor: str) -> None:
    """Let ``task``'s gated command (the ``stage``: before its start or its completion, for ``attempt``)
    through only once an operator granted it. The first time it arrives, Nexum asks for the approval
    itself (``ApprovalRequested``, committed) and refuses 409 ``approval_required`` naming it; while it is
    pending, the same; denied, 409 ``approval_denied`` with the operator's reason, until the agent requests
    a new approval of the action and an operator grants it."""
    if stage not in approval_stages(task=task):
        return
    action = GATE_ACTIONS[stage]
    latest = _latest_approval(task_id=str(task.id), action=action, attempt=attempt, arguments_digest="")
    if latest is None:
        latest = _gate_approval_ask(task=task, stage=stage, attempt=attempt, actor=actor)
    decide_gate(
        action=action,
        task_key=task.key,
        latest=ApprovalView(str(latest.id), latest.state, latest.decision_reason),
    )


def _latest_approval(*, task_id: str, action: str, attempt: int, arguments_digest: str) -> Approval | None:
    return (
        Approval.objects.filter(
            task_id=task_id, action=action, attempt=attempt, arguments_digest=arguments_digest
        )
        .order_by("-position")
        .first()
    )


def _gate_approval_ask(*, task: Task, stage: str, attempt: int, actor: str) -> Approval:
    action = GATE_ACTIONS[stage]
    approval_id = gate_approval_id(str(task.id), action, attempt)
    with contextlib.suppress(ConcurrencyError):  # a concurrent command asked first: the same approval
        store.append(
            stream_id=approval_stream(approval_id),
            events=[
                ApprovalRequested(
                    approval_id=approval_id,
                    task_id=str(task.id),
                    goal_id=str(task.goal_id),
                    action=action,
                    arguments_digest="",
                    attempt=attempt,
                    stage=stage,
                    reason=f"task {task.key!r} needs an operator's approval {stage.replace('_', ' ')}",
                )
            ],
            expected_version=0,
            actor=actor,
            project_id=str(task.project_id),
        )
    return Approval.objects.get(id=approval_id)


def approval_request(
    *,
    project_id: str,
    task_id: str,
    action: object,
    reason: object,
    actor: str,
    arguments_digest: object = "",
    idempotency_key: str | None = None,
) -> Approval:
    """An agent asks an operator to approve ``action`` on the task's current attempt: one of its own
    actions (``arguments_digest``: the sha256 of its arguments), or ``start`` / ``complete`` of a task that
    waits at that stage (again, after a denial; ``start`` is for the attempt the start would begin, so only
    of a pending or failed task, ``complete`` only of a running one: 409 ``illegal_transition`` otherwise).
    While an approval of the same action, attempt and arguments is pending, 409 ``approval_pending`` names
    it."""
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    if task.is_goal:
        raise IllegalTransition("approvals are for a goal's tasks, not the goal", field="task_id")
    action = validate_action(action)
    digest = validate_arguments_digest(arguments_digest)
    why = validate_decision_reason(reason)
    stage = _STAGE_OF_ACTION.get(action, "")
    if stage:
        if digest:
            raise ValidationFailed(f"the gate's {action} takes no arguments_digest", field="arguments_digest")
        if task.state not in ALLOWED_FROM["gate" if stage == BEFORE_COMPLETE else "start"]:
            raise IllegalTransition(
                f"task {task.key!r} is {task.state}: its {action} cannot be approved now",
                field="action",
                details={"state": task.state},
            )
        if stage not in approval_stages(task=task):
            raise ApprovalNotRequired(
                f"task {task.key!r} does not wait for an approval {stage.replace('_', ' ')}", field="action"
            )
    attempt = task.attempt + 1 if action == GATE_ACTIONS[BEFORE_START] else task.attempt
    if idempotency_key is not None:
        approval_id = str(uuid.uuid5(AGENT_APPROVAL_IDS, f"{task.id}:{idempotency_key}"))
    else:
        approval_id = str(uuid.uuid4())
    replay = idempotency_key is not None and Approval.objects.filter(id=approval_id).exists()
    if not replay:
        latest = _latest_approval(
            task_id=str(task.id), action=action, attempt=attempt, arguments_digest=digest
        )
        if latest is not None and latest.state == PENDING:
            raise ApprovalPending(
                f"approval {latest.id} of {action} is already pending; wait for the operator's answer",
                field="action",
                details={"approval_id": str(latest.id)},
            )
    store.append(
        stream_id=approval_stream(approval_id),
        events=[
            ApprovalRequested(
                approval_id=approval_id,
                task_id=str(task.id),
                goal_id=str(task.goal_id),
                action=action,
                arguments_digest=digest,
                attempt=attempt,
                stage=stage,
                reason=why,
            )
        ],
        expected_version=0,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=str(task.project_id),
    )
    return Approval.objects.get(id=approval_id)


def approval_decide(
    *, project_id: str, approval_id: str, decision: object, reason: object, actor: str
) -> Approval:
    """An operator grants or denies a pending approval, with a reason (an event). Whether the caller may is
    the caller's check: the API refuses an agent token (403), the UI is for staff. A decided approval is
    409 ``approval_decided``."""
    approval = selectors.approval_get(project_id=project_id, approval_id=approval_id)
    if decision not in (GRANT, DENY):
        raise ValidationFailed(f"decision must be {GRANT} or {DENY}", field="decision")
    why = validate_decision_reason(reason)
    if approval.state != PENDING:
        raise ApprovalDecided(
            f"approval {approval.id} is already {approval.state}",
            field="approval_id",
            details={"state": approval.state},
        )
    event_class = ApprovalGranted if decision == GRANT else ApprovalDenied
    try:
        store.append(
            stream_id=approval_stream(str(approval.id)),
            events=[event_class(approval_id=str(approval.id), task_id=str(approval.task_id), reason=why)],
            expected_version=approval.version,
            actor=actor,
            project_id=str(approval.project_id),
        )
    except ConcurrencyError:
        approval.refresh_from_db()
        raise ApprovalDecided(
            f"approval {approval.id} was decided meanwhile: {approval.state}",
            field="approval_id",
            details={"state": approval.state},
        ) from None
    approval.refresh_from_db()
    return approval
