"""The moves of a task through its lifecycle: start, fail, block, unblock, cancel, and the verification
gate's decision.

They decide with the pure rules of ``nexum/core/tasks/lifecycle.py`` and append to the task's own stream
(``task-<id>``) at the version they decided on. No function here sets a task ``completed`` except
``task_record_gate_decision``, which is reserved for the verification gate (SPEC V): it is called by the
verification app after its deterministic checks, never by an endpoint or the admin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nexum.core.errors import IllegalTransition, require_expected_version
from nexum.core.events import DomainEvent
from nexum.core.tasks.lifecycle import (
    TaskState,
    decide_block,
    decide_cancel,
    decide_fail,
    decide_gate_decision,
    decide_start,
    decide_unblock,
    task_state_from_row,
    task_stream,
)
from nexum.core.text import validate_reason
from nexum.eventstore import store
from tasks_app import hooks, selectors
from tasks_app.models import Task


def task_start(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> Task:
    """pending → running once every dependency is completed; failed → running is a retry (attempt + 1).

    Every start guard (``hooks.TaskStarting``) must pass. The plan gate's (SPEC R9) refuses with 422
    ``plan_gate_closed`` while the task's latest context bundle leaves an escalation open, unless an operator
    overrode it. Then the approval gate (``hooks.TaskStartDecided``) refuses with 409 ``approval_required``
    (or ``approval_denied``) until an operator grants the start of this attempt, when the task needs it."""

    def decide(task: Task, state: TaskState) -> list[DomainEvent]:
        hooks.handle(hooks.TaskStarting(project_id=str(task.project_id), task_id=str(task.id)))
        events = decide_start(
            state, dependency_states=selectors.task_dependency_states(task=task), reason=reason
        )
        hooks.handle(
            hooks.TaskStartDecided(
                project_id=str(task.project_id), task_id=str(task.id), attempt=task.attempt + 1, actor=actor
            )
        )
        return events

    return _transition(
        project_id, task_id, "TaskStarted", decide, actor, reason, expected_version, idempotency_key
    )


def task_fail(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> Task:
    """running → failed (retryable with ``task_start``)."""
    return _transition(
        project_id,
        task_id,
        "TaskFailed",
        lambda task, state: decide_fail(state, reason=reason),
        actor,
        reason,
        expected_version,
        idempotency_key,
    )


def task_block(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> Task:
    """running → blocked: the task needs a human or an operator."""
    return _transition(
        project_id,
        task_id,
        "TaskBlocked",
        lambda task, state: decide_block(state, reason=reason),
        actor,
        reason,
        expected_version,
        idempotency_key,
    )


def task_unblock(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> Task:
    """blocked → running."""
    return _transition(
        project_id,
        task_id,
        "TaskUnblocked",
        lambda task, state: decide_unblock(state, reason=reason),
        actor,
        reason,
        expected_version,
        idempotency_key,
    )


def task_cancel(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> Task:
    """Any non-final state → cancelled (final)."""
    return _transition(
        project_id,
        task_id,
        "TaskCancelled",
        lambda task, state: decide_cancel(state, reason=reason),
        actor,
        reason,
        expected_version,
        idempotency_key,
    )


def task_record_gate_decision(
    *,
    task_id: str,
    outcome: str,
    decision_id: str,
    expected_version: int | None,
    actor: str,
    reason: str = "",
    idempotency_key: str | None = None,
) -> Task:
    """RESERVED FOR THE VERIFICATION GATE: record its decision on a running task.

    ``outcome`` is ``completed``, ``failed`` or ``blocked``. This is the only code path that appends
    ``TaskCompleted``. It must never be called from an endpoint, an admin action or on an agent's claim —
    only by the verification app once its deterministic checks have decided. ``expected_version`` is the
    task version the gate ran against: of two concurrent decisions exactly one is recorded.
    """
    task = selectors.task_get_unscoped(task_id=task_id)
    return _transition(
        str(task.project_id),
        str(task.id),
        {"completed": "TaskCompleted", "failed": "TaskFailed", "blocked": "TaskBlocked"}.get(outcome, ""),
        lambda task, state: decide_gate_decision(
            state, outcome=outcome, decision_id=decision_id, reason=reason
        ),
        actor,
        reason,
        expected_version,
        idempotency_key,
    )


def _transition(
    project_id: str,
    task_id: str,
    event_type: str,
    decide: Callable[[Task, TaskState], list[DomainEvent]],
    actor: str,
    reason: str,
    expected_version: int | None,
    idempotency_key: str | None,
) -> Task:
    """Load the task within the project, decide on its current state, append at the version decided on."""
    reason = validate_reason(reason)
    task = selectors.task_get(project_id=project_id, task_id=task_id)
    if task.is_goal:
        raise IllegalTransition(
            "a goal's state is derived from its tasks; start, fail, block, unblock or cancel its tasks",
            field="task_id",
            details={"state": task.state},
        )
    stream_id = task_stream(str(task.id))
    if idempotency_key is not None and _already_applied(stream_id, idempotency_key, event_type, reason):
        return task
    require_expected_version(task.version, expected_version, f"task {task.key}")
    events = decide(task, task_state_from_row(_row(task)))
    store.append(
        stream_id=stream_id,
        events=events,
        expected_version=task.version,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=str(task.project_id),
    )
    task.refresh_from_db()
    return task


def _already_applied(stream_id: str, idempotency_key: str, event_type: str, reason: str) -> bool:
    """Did a request with this idempotency key already change this task the same way?"""
    return store.replayed(
        stream_id,
        idempotency_key,
        same_request=lambda recorded: (
            [(r.event_type, r.data.get("reason")) for r in recorded] == [(event_type, reason)]
        ),
        different=f"idempotency key {idempotency_key!r} was used on this task for a different change",
    )


def _row(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "goal_id": task.goal_id,
        "key": task.key,
        "depends_on": task.depends_on,
        "state": task.state,
        "attempt": task.attempt,
        "version": task.version,
    }
