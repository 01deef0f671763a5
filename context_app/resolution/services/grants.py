"""Grants (SPEC R2): what the resolver may read for a goal or one task, issued and revoked."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime

from context_app.resolution import selectors
from context_app.resolution.models import Grant, Source
from context_app.resolution.services.authority import require_content_authority
from context_app.resolution.services.clock import aware_now
from nexum.core.errors import NotFound, ValidationFailed
from nexum.core.ids import RESOLUTION_IDS
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.validation import validate_grant_scopes
from nexum.core.text import validate_reason
from nexum.core.trust import TrustClass
from nexum.eventstore import store
from tasks_app import selectors as task_selectors


def grant_issue(
    *,
    project_id: str,
    sources: Mapping[str, Sequence[str]],
    actor: str,
    goal_id: str | None = None,
    task_id: str | None = None,
    expires_at: datetime | None = None,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
    now: datetime | None = None,
    idempotency_key: str | None = None,
) -> Grant:
    """Allow the resolver to read ``sources`` (name → scopes; ``[]`` or ``["*"]`` = every declared scope) for
    a goal (shared by its tasks) or one task, until ``expires_at`` if given. Every source must be one of the
    project's (another project's source is not found)."""
    project = task_selectors.project_get(project_id=project_id)
    digests = require_content_authority(
        project_id=str(project.id),
        action="grant.create",
        content_trust=content_trust,
        derived_from=derived_from,
    )
    if (goal_id is None) == (task_id is None):
        raise ValidationFailed("a grant belongs to exactly one goal or one task", field="scope")
    if goal_id is not None:
        goal = task_selectors.goal_get(project_id=project.id, goal_id=goal_id)
        scope_goal, scope_task = str(goal.id), None
    else:
        task = task_selectors.task_get(project_id=project.id, task_id=task_id)  # type: ignore[arg-type]
        scope_goal, scope_task = str(task.goal_id), (None if task.is_goal else str(task.id))
    scopes = validate_grant_scopes(sources)
    known = set(
        Source.objects.filter(project_id=project.id, name__in=list(scopes)).values_list("name", flat=True)
    )
    missing = sorted(set(scopes) - known)
    if missing:
        raise NotFound(f"no source {missing[0]!r} in this project", field="sources")
    if expires_at is not None:
        if not isinstance(expires_at, datetime) or expires_at.tzinfo is None:
            raise ValidationFailed("expires_at must be a timezone-aware time", field="expires_at")
        if expires_at <= aware_now(now):
            raise ValidationFailed("expires_at is in the past", field="expires_at")
    reason = validate_reason(reason)
    if idempotency_key is not None:
        grant_id = str(uuid.uuid5(RESOLUTION_IDS, f"grant:{project.id}:{idempotency_key}"))
    else:
        grant_id = str(uuid.uuid4())
    store.append(
        stream_id=resolution_events.grant_stream(grant_id),
        events=[
            resolution_events.GrantIssued(
                grant_id=grant_id,
                goal_id=scope_goal,
                task_id=scope_task,
                scopes={name: list(granted) for name, granted in scopes.items()},
                expires_at=expires_at.isoformat() if expires_at is not None else None,
                reason=reason,
                derived_from=digests,
            )
        ],
        expected_version=0,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=str(project.id),
    )
    return Grant.objects.get(id=grant_id)


def grant_revoke(
    *,
    project_id: str,
    grant_id: str,
    reason: str,
    actor: str,
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Grant:
    require_content_authority(
        project_id=project_id, action="grant.revoke", content_trust=content_trust, derived_from=derived_from
    )
    grant = selectors.grant_get(project_id=project_id, grant_id=grant_id)
    if grant.revoked_at is None:
        store.append(
            stream_id=resolution_events.grant_stream(str(grant.id)),
            events=[resolution_events.GrantRevoked(grant_id=str(grant.id), reason=validate_reason(reason))],
            expected_version=grant.version,
            actor=actor,
            project_id=str(grant.project_id),
        )
        grant.refresh_from_db()
    return grant
