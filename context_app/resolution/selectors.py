"""Reads of the context resolver, always within one project: another project's object is not found.

``latest_bundle(task_id=…)`` is what the compile service reads: the digest of a task's latest bundle and its
items with their text, trust class, origin and the compiler kind they become.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from context_app.resolution.models import (
    BundleContent,
    Escalation,
    Grant,
    Resolve,
    Retrieval,
    Source,
    TaskContext,
    TaskQuestions,
)
from nexum.adapters.sources.registry import compiled_kind
from nexum.core.errors import NotFound
from nexum.core.ids import uuid_or_none
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.authorization import GrantRecord
from nexum.core.resolution.escalations import decide_plan_gate
from nexum.core.resolution.model import RequiredQuestion
from nexum.core.resolution.settlements import Settlement, rejected_items, settlement_of
from nexum.core.resolution.subjects import normalize_subject
from nexum.core.resolution.validation import questions_from_data
from tasks_app.models import Task

# The compiler kind each source kind's items become: code is evidence, the rest are facts.


def source_list(*, project_id: str | uuid.UUID) -> QuerySet[Source]:
    return Source.objects.filter(project_id=project_id).order_by("name")


def grant_get(*, project_id: str | uuid.UUID, grant_id: Any) -> Grant:
    pk = uuid_or_none(grant_id)
    grant = None if pk is None else Grant.objects.filter(project_id=project_id, id=pk).first()
    if grant is None:
        raise NotFound(f"no grant {grant_id}", field="grant_id")
    return grant


def grant_list(*, project_id: str | uuid.UUID, goal_id: Any = None, task_id: Any = None) -> QuerySet[Grant]:
    """Grants of the project; of one goal (the goal's own) or one task (the task's own)."""
    grants = Grant.objects.filter(project_id=project_id)
    if goal_id is not None:
        grants = grants.filter(goal_id=goal_id, task_id__isnull=True)
    if task_id is not None:
        grants = grants.filter(task_id=task_id)
    return grants.order_by("issued_at", "id")


def grant_records(*, task: Task) -> list[GrantRecord]:
    """The grants that apply to a task, not revoked: its own and its goal's."""
    rows = Grant.objects.filter(project_id=task.project_id, goal_id=task.goal_id, revoked_at__isnull=True)
    applicable = [g for g in rows if g.task_id is None or g.task_id == task.id]
    return [
        GrantRecord(scopes={k: tuple(v) for k, v in g.scopes.items()}, expires_at=g.expires_at)
        for g in sorted(applicable, key=lambda g: (g.issued_at, str(g.id)))
    ]


def task_questions(*, task_id: str | uuid.UUID) -> tuple[RequiredQuestion, ...]:
    row = TaskQuestions.objects.filter(task_id=task_id).first()
    return () if row is None else questions_from_data(row.questions)


def task_context(*, task_id: str | uuid.UUID) -> TaskContext | None:
    return TaskContext.objects.filter(task_id=task_id).first()


def bundle_content(*, digest: str) -> dict[str, Any]:
    row = BundleContent.objects.filter(digest=digest).first()
    if row is None:
        raise NotFound(f"no bundle {digest}", field="digest")
    if row.pruned_at is not None:
        raise NotFound(
            f"bundle {digest} was pruned by retention at {row.pruned_at.isoformat()}: its digest and its "
            "items' provenance (the resolve's bundle items) are kept, its content is not",
            field="digest",
            code="bundle_pruned",
            details={"digest": digest, "pruned_at": row.pruned_at.isoformat()},
        )
    return {**row.content, "digest": row.digest}


def bundle_get(*, project_id: str | uuid.UUID, digest: str) -> dict[str, Any]:
    """A bundle by digest, if one of the project's resolves produced it."""
    if (
        not isinstance(digest, str)
        or not Resolve.objects.filter(project_id=project_id, bundle_digest=digest).exists()
    ):
        raise NotFound(f"no bundle {digest}", field="digest")
    return bundle_content(digest=digest)


def resolve_list(*, project_id: str | uuid.UUID, task_id: Any = None) -> QuerySet[Resolve]:
    resolves = Resolve.objects.filter(project_id=project_id)
    if task_id is not None:
        resolves = resolves.filter(task_id=task_id)
    return resolves.order_by("-position")


def retrievals_of(*, resolve_id: Any) -> QuerySet[Retrieval]:
    return Retrieval.objects.filter(resolve_id=resolve_id).order_by("position")


def escalation_get(*, project_id: str | uuid.UUID, escalation_id: Any) -> Escalation:
    pk = uuid_or_none(escalation_id)
    escalation = None if pk is None else Escalation.objects.filter(project_id=project_id, id=pk).first()
    if escalation is None:
        raise NotFound(f"no escalation {escalation_id}", field="escalation_id")
    return escalation


def escalation_list(
    *, project_id: str | uuid.UUID, state: str | None = None, task_id: Any = None
) -> QuerySet[Escalation]:
    escalations = Escalation.objects.filter(project_id=project_id)
    if state is not None:
        escalations = escalations.filter(state=state)
    if task_id is not None:
        escalations = escalations.filter(task_id=task_id)
    return escalations.order_by("-position")


def goal_settlements(*, goal_id: str | uuid.UUID) -> tuple[Settlement, ...]:
    """The conflicts a human settled on any task of the goal (a side picked or a fact supplied), oldest
    first: each applies to every task of the goal that sees its subject."""
    rows = Escalation.objects.filter(
        goal_id=goal_id, kind="conflict", resolution__in=resolution_events.SETTLING_ACTIONS
    ).order_by("position")
    settlements = (
        settlement_of(
            escalation_id=str(row.id),
            kind=row.kind,
            subjects=row.subjects,
            members=[entry["digest"] for entry in row.evidence],
            resolution=row.resolution,
            detail=row.resolution_detail,
        )
        for row in rows
    )
    return tuple(settlement for settlement in settlements if settlement is not None)


def rejected_digests(*, goal_id: str | uuid.UUID, items: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The digests among a bundle's ``items`` that a human rejected by picking another side of a conflict on
    the item's subject, on this task or any other task of its goal."""
    return rejected_items(
        goal_settlements(goal_id=goal_id), ((item["digest"], item.get("subject")) for item in items)
    )


def goal_tasks_seeing(*, goal_id: str | uuid.UUID, subject: str) -> list[Task]:
    """The tasks of a goal whose latest bundle holds an item on ``subject`` (what a settlement of a conflict
    on that subject applies to), in plan order."""
    wanted = normalize_subject(subject)
    heads = TaskContext.objects.filter(goal_id=goal_id, latest_resolve_id__isnull=False)
    digests = {str(head.task_id): head.latest_bundle_digest for head in heads}
    contents = dict(
        BundleContent.objects.filter(digest__in=set(digests.values())).values_list("digest", "content")
    )
    seeing = {
        task_id
        for task_id, digest in digests.items()
        if any(
            normalize_subject(item.get("subject") or "") == wanted
            for item in contents.get(digest, {}).get("items", [])
        )
    }
    return list(Task.objects.filter(id__in=seeing).order_by("ordinal"))


# --- for the compile service --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleEntry:
    """One item of a bundle, ready to become a compiler fact or evidence item.

    ``origin`` is ``<source>:<locator>``; ``kind`` the compiler kind (``code`` or ``fact``); ``trust_class``
    the effective class (content below ``repository_authored`` must be rendered as quoted data, C9)."""

    digest: str
    text: str
    trust_class: str
    origin: str
    kind: str
    source: str
    locator: str
    subject: str | None
    observed_at: str | None
    stale: bool
    stale_reason: str | None
    conflict_group: str | None
    labels: tuple[str, ...]
    rejected: bool

    @property
    def suspected_instruction(self) -> bool:
        return "suspected_instruction" in self.labels


@dataclass(frozen=True)
class LatestBundle:
    digest: str
    task_id: str
    resolve_id: str
    complete: bool
    stop_reason: str
    items: tuple[BundleEntry, ...]
    resolved_at: datetime | None = None
    """When the resolve was recorded: what the items' ages are measured against."""

    @property
    def usable_items(self) -> tuple[BundleEntry, ...]:
        """The items minus those a human rejected when picking a side of a conflict."""
        return tuple(item for item in self.items if not item.rejected)


def latest_bundle(*, task_id: str | uuid.UUID) -> LatestBundle | None:
    """The task's latest bundle, or ``None`` when it was never resolved."""
    head = TaskContext.objects.filter(task_id=task_id).first()
    if head is None or head.latest_resolve_id is None:
        return None
    content = bundle_content(digest=head.latest_bundle_digest)
    kinds = dict(Source.objects.filter(project_id=head.project_id).values_list("name", "kind"))
    rejected = rejected_digests(goal_id=head.goal_id, items=content["items"])
    entries = tuple(
        BundleEntry(
            digest=item["digest"],
            text=item["text"],
            trust_class=item["trust_class"],
            origin=f"{item['source']}:{item['locator']}",
            kind=compiled_kind(kinds.get(item["source"], "")),
            source=item["source"],
            locator=item["locator"],
            subject=item.get("subject"),
            observed_at=item.get("observed_at"),
            stale=bool(item.get("stale")),
            stale_reason=item.get("stale_reason"),
            conflict_group=item.get("conflict_group"),
            labels=tuple(item.get("labels") or ()),
            rejected=item["digest"] in rejected,
        )
        for item in content["items"]
    )
    return LatestBundle(
        digest=head.latest_bundle_digest,
        task_id=str(head.task_id),
        resolve_id=str(head.latest_resolve_id),
        complete=bool(head.complete),
        stop_reason=head.stop_reason,
        items=entries,
        resolved_at=head.resolved_at,
    )


def plan_gate_guard(*, project_id: str, task_id: str) -> None:
    """Raise ``PlanGateClosed`` (422 ``plan_gate_closed``) while the task's latest bundle leaves an
    escalation open, unless an operator overrode the gate for that bundle."""
    head = TaskContext.objects.filter(project_id=project_id, task_id=task_id).first()
    if head is None or head.latest_resolve_id is None:
        return
    open_escalations = [
        {"id": str(e.id), "kind": e.kind, "missing": e.missing}
        for e in Escalation.objects.filter(task_id=task_id, state=resolution_events.ESCALATION_OPEN).order_by(
            "position"
        )
    ]
    decide_plan_gate(
        has_bundle=True,
        complete=bool(head.complete),
        open_escalations=open_escalations,
        overridden=head.overridden,
    )
