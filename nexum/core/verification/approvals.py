"""A human's yes before a risky step (issue 28 item 4): the approval's events, its rules and its errors.

Two kinds of approval, one record:

- **A gate approval** holds a task's ``start`` or ``complete`` until an operator grants it. A task needs one
  when its contract says ``approval: before_start`` or ``before_complete``, or, when its contract says
  nothing (or there is no contract), when the task's risk is ``high`` and the project's default
  (``high_risk_approval``) names a stage. ``approval: none`` in a contract opts a task out of the default.
- **An action approval** is an agent asking before one action of its own (``deploy`` with the digest of its
  arguments): Nexum records the question and the answer; the agent reads it before acting.

An approval belongs to one attempt of its task: a grant lets that attempt start (``start`` is for the
attempt the start would begin) or complete, and a retry asks again. Denied, the gated command answers 409
``approval_denied`` with the denial's reason until a new approval of the same action is requested (by the
agent, ``POST /tasks/{id}/approvals``) and granted.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Final

from nexum.core.errors import Conflict, ValidationFailed
from nexum.core.events import DomainEvent, event_type
from nexum.core.ids import GATE_APPROVAL_IDS
from nexum.core.text import validate_reason

BEFORE_START: Final = "before_start"
BEFORE_COMPLETE: Final = "before_complete"
NO_APPROVAL: Final = "none"
STAGES: Final = (BEFORE_START, BEFORE_COMPLETE)
CONTRACT_APPROVALS: Final = (*STAGES, NO_APPROVAL)

# The actions a gate approval is for, by stage; any other action name is an agent's own.
GATE_ACTIONS: Final = {BEFORE_START: "start", BEFORE_COMPLETE: "complete"}

PENDING: Final = "pending"
GRANTED: Final = "granted"
DENIED: Final = "denied"
APPROVAL_STATES: Final = (PENDING, GRANTED, DENIED)
GRANT: Final = "grant"
DENY: Final = "deny"
DECISIONS: Final = (GRANT, DENY)

ACTION_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
DIGEST_PATTERN: Final = re.compile(r"^[0-9a-f]{64}$")
HIGH_RISK: Final = "high"


def approval_stream(approval_id: str) -> str:
    return f"approval-{approval_id}"


def gate_approval_id(task_id: str, action: str, attempt: int) -> str:
    """The id of the approval Nexum asks for itself when a gated command first arrives: one per task,
    action and attempt, so two concurrent starts ask once."""
    return str(uuid.uuid5(GATE_APPROVAL_IDS, f"{task_id}:{action}:{attempt}"))


# --- errors ---


class ApprovalRequired(Conflict):
    code = "approval_required"


class ApprovalWasDenied(Conflict):
    code = "approval_denied"


class ApprovalPending(Conflict):
    code = "approval_pending"


class ApprovalDecided(Conflict):
    code = "approval_decided"


class ApprovalNotRequired(Conflict):
    code = "approval_not_required"


# --- events ---


@event_type("ApprovalRequested")
@dataclass(frozen=True)
class ApprovalRequested(DomainEvent):
    """Someone asks a human to approve ``action`` on a task's ``attempt`` (``arguments_digest``: the sha256
    of the action's arguments, empty for the gate's ``start`` and ``complete``). ``stage``: the gate stage
    it holds, or empty for an agent's own action."""

    approval_id: str
    task_id: str
    goal_id: str
    action: str
    arguments_digest: str
    attempt: int
    stage: str
    reason: str


@event_type("ApprovalGranted")
@dataclass(frozen=True)
class ApprovalGranted(DomainEvent):
    """An operator said yes, with a reason."""

    approval_id: str
    task_id: str
    reason: str


@event_type("ApprovalDenied")
@dataclass(frozen=True)
class ApprovalDenied(DomainEvent):
    """An operator said no, with a reason: the gated command is refused with it until a new approval is
    requested and granted."""

    approval_id: str
    task_id: str
    reason: str


# --- rules ---


def validate_stage_setting(value: object, field: str = "high_risk_approval") -> str | None:
    """A project's default for high-risk tasks: a stage, or ``None`` (no approval by default)."""
    if value is None:
        return None
    if value not in STAGES:
        raise ValidationFailed(f"{field} must be null or one of {', '.join(STAGES)}", field=field)
    return str(value)


def validate_contract_approval(value: object) -> str | None:
    if value is None:
        return None
    if value not in CONTRACT_APPROVALS:
        raise ValidationFailed(
            f"approval must be one of {', '.join(CONTRACT_APPROVALS)}, got {value!r}", field="approval"
        )
    return str(value)


def required_stages(*, contract_approval: str | None, risk: str, high_risk_default: str | None) -> set[str]:
    """The stages a task's commands wait at: its contract's word, else the project's default when the task's
    risk is high."""
    if contract_approval == NO_APPROVAL:
        return set()
    if contract_approval is not None:
        return {contract_approval}
    if risk == HIGH_RISK and high_risk_default is not None:
        return {high_risk_default}
    return set()


def validate_action(value: object) -> str:
    if not isinstance(value, str) or not ACTION_PATTERN.fullmatch(value):
        raise ValidationFailed(
            "an action is 1–100 letters, digits, '_', '.', ':' or '-', starting with a letter or digit",
            field="action",
        )
    return value


def validate_arguments_digest(value: object) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not DIGEST_PATTERN.fullmatch(value):
        raise ValidationFailed(
            "arguments_digest is the sha256 of the action's arguments: 64 lowercase hex digits",
            field="arguments_digest",
        )
    return value


def validate_decision_reason(reason: object) -> str:
    """An operator's decision says why: a non-empty reason (``validate_reason``'s bounds)."""
    text = validate_reason(reason)
    if not text:
        raise ValidationFailed("a decision needs a reason (why yes, or why no)", field="reason")
    return text


@dataclass(frozen=True)
class ApprovalView:
    """What the gate needs to know about one recorded approval."""

    approval_id: str
    state: str
    decision_reason: str


def decide_gate(*, action: str, task_key: str, latest: ApprovalView | None) -> None:
    """Let a gated command through only on a granted approval of its action; otherwise raise 409: pending
    (``approval_required`` naming it) or denied (``approval_denied`` with the reason). ``latest`` None is the
    caller's to handle: it asks for an approval first."""
    if latest is None:
        raise ValueError("decide_gate needs the latest approval; ask for one first")
    if latest.state == GRANTED:
        return
    details = {"approval_id": latest.approval_id, "action": action}
    if latest.state == DENIED:
        raise ApprovalWasDenied(
            f"an operator denied {action} of task {task_key!r}: {latest.decision_reason}; request a new "
            "approval (POST /api/v1/tasks/{id}/approvals) to ask again",
            field="approval",
            details={**details, "reason": latest.decision_reason},
        )
    raise ApprovalRequired(
        f"{action} of task {task_key!r} waits for an operator's approval {latest.approval_id}",
        field="approval",
        details=details,
    )
