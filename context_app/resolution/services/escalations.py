"""Closing an escalation (SPEC R5–R7, I5): one service per action (supply a fact, pick a side, grant a
source, cancel the task), ``escalation_resolve`` dispatching by action; the last open one closed opens the
plan gate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from context_app.resolution import selectors
from context_app.resolution.models import Escalation, TaskContext
from context_app.resolution.services.authority import require_content_authority
from context_app.resolution.services.grants import grant_issue
from context_app.world.services.facts import fact_record
from context_app.world.services.scopes import scope_resolve
from nexum.core.errors import ValidationFailed
from nexum.core.events import DomainEvent
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.escalations import EscalationAlreadyResolved, decide_pick_side
from nexum.core.resolution.settlements import settled_detail, settlement_of, settles
from nexum.core.text import validate_reason
from nexum.core.trust import TrustClass
from nexum.eventstore import store
from tasks_app import selectors as task_selectors
from tasks_app.models import Task
from tasks_app.services.lifecycle import task_cancel


def escalation_resolve(
    *,
    project_id: str,
    escalation_id: str,
    action: str,
    actor: str,
    text: str | None = None,
    subject: str | None = None,
    chosen: Sequence[str] = (),
    source: str | None = None,
    scopes: Sequence[str] | None = None,
    expires_at: datetime | None = None,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Escalation:
    """Close a gap by ``action`` (the API's and the escalation UI's entry point): the service of that action
    with the arguments it takes — ``escalation_supply_fact`` (``text``, ``subject``), ``escalation_pick_side``
    (``chosen``), ``escalation_grant_source`` (``source``, ``scopes``, ``expires_at``) or
    ``escalation_cancel``. Each is an event; the last open escalation resolved opens the plan gate."""
    common: dict[str, Any] = {
        "project_id": project_id,
        "escalation_id": escalation_id,
        "actor": actor,
        "reason": reason,
        "content_trust": content_trust,
        "derived_from": derived_from,
    }
    if action == resolution_events.RESOLVE_SUPPLY_FACT:
        return escalation_supply_fact(text=text, subject=subject, **common)
    if action == resolution_events.RESOLVE_PICK_SIDE:
        return escalation_pick_side(chosen=chosen, **common)
    if action == resolution_events.RESOLVE_GRANT_SOURCE:
        return escalation_grant_source(source=source, scopes=scopes, expires_at=expires_at, **common)
    if action == resolution_events.RESOLVE_CANCEL:
        return escalation_cancel(**common)
    raise ValidationFailed(
        f"action must be one of {', '.join(resolution_events.RESOLUTION_ACTIONS)}", field="action"
    )


def escalation_supply_fact(
    *,
    project_id: str,
    escalation_id: str,
    text: Any,
    actor: str,
    subject: str | None = None,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Escalation:
    """Close a gap with a fact the actor supplies: recorded as a verified, ``repository_authored`` fact with
    the actor as its source, on ``subject`` (by default the gap's first). For a conflict the fact is the
    goal's and it settles the conflict for the whole goal (``_settled_with``); otherwise it is the task's."""
    opening = _opening(
        project_id=project_id,
        escalation_id=escalation_id,
        action=resolution_events.RESOLVE_SUPPLY_FACT,
        reason=reason,
        content_trust=content_trust,
        derived_from=derived_from,
    )
    escalation, task = opening.escalation, opening.task
    if not isinstance(text, str) or not text.strip():
        raise ValidationFailed("supply the missing fact as text", field="text")
    scope = {"goal_id": str(task.goal_id)} if escalation.kind == "conflict" else {"task_id": str(task.id)}
    with transaction.atomic():
        fact = fact_record(
            scope=scope_resolve(project_id=project_id, **scope),
            text=text,
            source=actor,
            subject=subject if subject is not None else (escalation.subjects or [""])[0],
            verified=True,
            trust_class="repository_authored",
            actor=actor,
        )
        return _record_resolution(opening, detail={"fact_id": str(fact.id)}, actor=actor)


def escalation_pick_side(
    *,
    project_id: str,
    escalation_id: str,
    chosen: Sequence[str],
    actor: str,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Escalation:
    """Settle a conflict by keeping ``chosen`` (item digests of its members): the other members stay on the
    record, marked rejected, and are left out of the compile of every task of the goal that sees the
    subject; the goal's other open conflicts among the same members close with it (``_settled_with``)."""
    opening = _opening(
        project_id=project_id,
        escalation_id=escalation_id,
        action=resolution_events.RESOLVE_PICK_SIDE,
        reason=reason,
        content_trust=content_trust,
        derived_from=derived_from,
    )
    escalation = opening.escalation
    evidence = [entry["digest"] for entry in escalation.evidence]
    if escalation.kind != "conflict":
        raise ValidationFailed("only a conflict has sides to pick", field="action")
    rejected = decide_pick_side(evidence, list(chosen))
    with transaction.atomic():
        detail = {"chosen": sorted(set(chosen)), "rejected": list(rejected)}
        return _record_resolution(opening, detail=detail, actor=actor)


def escalation_grant_source(
    *,
    project_id: str,
    escalation_id: str,
    source: Any,
    actor: str,
    scopes: Sequence[str] | None = None,
    expires_at: datetime | None = None,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Escalation:
    """Close a gap by granting the task ``source`` (``scopes``, default every declared scope, until
    ``expires_at`` if given): the next resolve reads it."""
    opening = _opening(
        project_id=project_id,
        escalation_id=escalation_id,
        action=resolution_events.RESOLVE_GRANT_SOURCE,
        reason=reason,
        content_trust=content_trust,
        derived_from=derived_from,
    )
    if not isinstance(source, str):
        raise ValidationFailed("name the source to grant", field="source")
    with transaction.atomic():
        grant = grant_issue(
            project_id=project_id,
            task_id=str(opening.task.id),
            sources={source: list(scopes or ["*"])},
            expires_at=expires_at,
            reason=opening.reason or f"escalation {opening.escalation.id}",
            derived_from=opening.digests,
            actor=actor,
        )
        return _record_resolution(opening, detail={"grant_id": str(grant.id), "source": source}, actor=actor)


def escalation_cancel(
    *,
    project_id: str,
    escalation_id: str,
    actor: str,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Escalation:
    """Close a gap by cancelling its task: every open escalation on the task is closed with it."""
    opening = _opening(
        project_id=project_id,
        escalation_id=escalation_id,
        action=resolution_events.RESOLVE_CANCEL,
        reason=reason,
        content_trust=content_trust,
        derived_from=derived_from,
    )
    task, escalation = opening.task, opening.escalation
    with transaction.atomic():
        if task.state != "cancelled":
            task_cancel(
                project_id=project_id,
                task_id=str(task.id),
                reason=opening.reason or f"escalation {escalation.id}",
                actor=actor,
            )
        others = Escalation.objects.filter(task_id=task.id, state=resolution_events.ESCALATION_OPEN).exclude(
            id=escalation.id
        )
        return _record_resolution(
            opening, detail={}, actor=actor, cancelled=list(others.order_by("position"))
        )


@dataclass(frozen=True)
class _Opening:
    """An open escalation an action may close, its task, the digests the request derives from (checked),
    and the checked reason."""

    action: str
    escalation: Escalation
    task: Task
    digests: tuple[str, ...]
    reason: str


def _opening(
    *,
    project_id: str,
    escalation_id: str,
    action: str,
    reason: str,
    content_trust: TrustClass | str | None,
    derived_from: Sequence[str],
) -> _Opening:
    """The checks every action makes first: the escalation is the project's, the request rests on nothing
    below ``repository_authored`` (R4), the reason is well-formed, and the escalation is still open."""
    escalation = selectors.escalation_get(project_id=project_id, escalation_id=escalation_id)
    digests = require_content_authority(
        project_id=project_id,
        action=f"escalation.{action}",
        content_trust=content_trust,
        derived_from=derived_from,
    )
    reason = validate_reason(reason)
    if escalation.state != resolution_events.ESCALATION_OPEN:
        raise EscalationAlreadyResolved(
            f"escalation {escalation.id} is already resolved ({escalation.resolution})",
            field="escalation_id",
        )
    task = task_selectors.task_get(project_id=project_id, task_id=escalation.task_id)
    return _Opening(action, escalation, task, digests, reason)


def _record_resolution(
    opening: _Opening, *, detail: dict[str, Any], actor: str, cancelled: Sequence[Escalation] = ()
) -> Escalation:
    """Append the resolution: ``EscalationResolved`` for the escalation (and for the ``cancelled`` ones with
    it), and for a settled conflict one for each open conflict of the goal it settles too, each on its own
    task's stream (``detail.settled_by`` naming this one). Returns the escalation as it is now."""
    escalation, task, action = opening.escalation, opening.task, opening.action
    resolved: dict[str, list[DomainEvent]] = {
        str(task.id): [
            resolution_events.EscalationResolved(
                escalation_id=str(item.id),
                task_id=str(task.id),
                resolution=action,
                detail=detail if item.id == escalation.id else {"cancelled_with": str(escalation.id)},
                reason=opening.reason,
            )
            for item in sorted([escalation, *cancelled], key=lambda e: e.position)
        ]
    }
    for other in _settled_with(escalation, action, detail):
        resolved.setdefault(str(other.task_id), []).append(
            resolution_events.EscalationResolved(
                escalation_id=str(other.id),
                task_id=str(other.task_id),
                resolution=action,
                detail=settled_detail(
                    detail,
                    settled_by=str(escalation.id),
                    members=[entry["digest"] for entry in other.evidence],
                ),
                reason=opening.reason,
            )
        )
    for task_id, events in resolved.items():
        store.append(
            stream_id=resolution_events.context_stream(task_id),
            events=events,
            expected_version=TaskContext.objects.get(task_id=task_id).version,
            actor=actor,
            project_id=str(task.project_id),
        )
    escalation.refresh_from_db()
    return escalation


def _settled_with(escalation: Escalation, action: str, detail: Mapping[str, Any]) -> list[Escalation]:
    """The open conflicts of the goal (other than ``escalation``) that its settlement decides too."""
    settlement = settlement_of(
        escalation_id=str(escalation.id),
        kind=escalation.kind,
        subjects=escalation.subjects,
        members=[entry["digest"] for entry in escalation.evidence],
        resolution=action,
        detail=detail,
    )
    if settlement is None:
        return []
    candidates = Escalation.objects.filter(
        goal_id=escalation.goal_id, kind="conflict", state=resolution_events.ESCALATION_OPEN
    ).exclude(id=escalation.id)
    return [
        other
        for other in candidates.order_by("position")
        if settles(
            settlement,
            kind=other.kind,
            subjects=other.subjects,
            members=[entry["digest"] for entry in other.evidence],
        )
    ]
