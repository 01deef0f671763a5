"""Overriding the plan gate (SPEC R9): an operator lets a task start although its latest bundle leaves an
escalation open (the gate itself is ``selectors.plan_gate_guard``)."""

from __future__ import annotations

from collections.abc import Sequence

from context_app.resolution.models import TaskContext
from context_app.resolution.services.authority import require_content_authority
from nexum.core.errors import Conflict, ValidationFailed
from nexum.core.resolution import events as resolution_events
from nexum.core.text import validate_reason
from nexum.core.trust import TrustClass
from nexum.eventstore import store
from tasks_app import selectors as task_selectors


def plan_gate_override(
    *,
    project_id: str,
    task_id: str,
    reason: str,
    actor: str,
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> TaskContext:
    """An operator lets the task start despite the open gaps of its latest bundle (recorded). A later
    resolve closes the gate again if gaps remain."""
    require_content_authority(
        project_id=project_id,
        action="plan_gate.override",
        content_trust=content_trust,
        derived_from=derived_from,
    )
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    reason = validate_reason(reason)
    if not reason.strip():
        raise ValidationFailed("an override needs a reason", field="reason")
    head = TaskContext.objects.filter(task_id=task.id).first()
    if head is None or head.latest_resolve_id is None:
        raise Conflict("the task has no resolved bundle; there is no gate to override", field="task_id")
    store.append(
        stream_id=resolution_events.context_stream(str(task.id)),
        events=[
            resolution_events.PlanGateOverridden(
                task_id=str(task.id),
                resolve_id=str(head.latest_resolve_id),
                bundle_digest=head.latest_bundle_digest,
                reason=reason,
            )
        ],
        expected_version=head.version,
        actor=actor,
        project_id=str(task.project_id),
    )
    head.refresh_from_db()
    return head
