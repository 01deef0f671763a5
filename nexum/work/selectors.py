"""Reads of work in flight: the pending requests of every kind, with their lease and pacing.

A request is pending while its read model says so (not decided, still queued); its ``Work`` row, when it has
one, says who holds its lease and when it was last sent. A pending request that no live lease covers and that
is older than a lease's lifetime is stuck: the dispatcher would send it, the dashboard lists it and
``nexum_requeue --stuck`` sends it by hand.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Min, Q, QuerySet
from django.utils import timezone

from nexum.core.ids import uuid_or_none
from nexum.work.kinds import WorkKind, work_kinds
from nexum.work.leases import lease_live
from nexum.work.models import Work


@dataclass(frozen=True)
class PendingRequest:
    kind: WorkKind
    request_id: uuid.UUID
    project_id: uuid.UUID
    task_id: uuid.UUID
    requested_at: datetime
    work: Work | None

    @property
    def key(self) -> str:
        return self.kind.key(self.request_id)

    def leased(self, now: datetime) -> bool:
        return lease_live(self.work, now)


def pending_requests(
    *,
    requested_before: datetime | None = None,
    request_id: object = None,
    limit: int = 500,
    waiting_turn_at: datetime | None = None,
) -> list[PendingRequest]:
    """Pending requests of every kind, oldest first (optionally requested before a time, or one by id;
    without those of the projects that have their kind's cap in flight at ``waiting_turn_at``)."""
    found: list[PendingRequest] = []
    for kind in work_kinds():
        rows = kind.model.objects.filter(kind.pending)
        if requested_before is not None:
            rows = rows.filter(requested_at__lte=requested_before)
        if waiting_turn_at is not None:
            rows = rows.exclude(project_id__in=projects_at_cap(kind, waiting_turn_at))
        if request_id is not None:
            rows = rows.filter(**{kind.id_field: uuid_or_none(request_id)})
        values = rows.order_by("requested_at").values_list(
            kind.id_field, "project_id", "task_id", "requested_at"
        )[:limit]
        found += [PendingRequest(kind, *row, work=None) for row in values]
    found.sort(key=lambda request: request.requested_at)
    found = found[:limit]
    works = Work.objects.in_bulk([request.key for request in found])
    return [
        PendingRequest(r.kind, r.request_id, r.project_id, r.task_id, r.requested_at, works.get(r.key))
        for r in found
    ]


def pending_request(request_id: object) -> PendingRequest | None:
    if uuid_or_none(request_id) is None:
        return None
    found = pending_requests(request_id=request_id, limit=1)
    return found[0] if found else None


def stuck_requests(*, now: datetime | None = None, limit: int = 500) -> list[PendingRequest]:
    """Pending requests older than a lease's lifetime that no live lease covers; a request waiting its turn
    behind its project's cap is not stuck (it is sent when a slot frees)."""
    now = now or timezone.now()
    older = now - timedelta(seconds=settings.NEXUM_LEASE_TTL_S)
    found = pending_requests(requested_before=older, limit=limit, waiting_turn_at=now)
    return [r for r in found if not r.leased(now)]


def pending_count(kind: WorkKind) -> int:
    """How many of the kind's requests are pending (the metrics' gauge)."""
    return kind.model.objects.filter(kind.pending).count()


def stuck_count(kind: WorkKind, now: datetime) -> int:
    """How many of the kind's requests ``stuck_requests`` would list, counted by the database (no limit)."""
    older = now - timedelta(seconds=settings.NEXUM_LEASE_TTL_S)
    leased = Work.objects.filter(kind=kind.name, owner__gt="", expires_at__gt=now).values("request_id")
    return (
        kind.model.objects.filter(kind.pending, requested_at__lte=older)
        .exclude(project_id__in=projects_at_cap(kind, now))
        .exclude(**{f"{kind.id_field}__in": leased})
        .count()
    )


def in_flight(kind: WorkKind, now: datetime) -> QuerySet[Work]:
    """The kind's requests that a live lease holds, or that were sent and are not yet due to be sent again."""
    return Work.objects.filter(kind=kind.name).filter(
        Q(owner__gt="", expires_at__gt=now) | Q(next_send_at__gt=now)
    )


def _in_flight_by_project(kind: WorkKind, now: datetime, project_id: object = None) -> dict[object, int]:
    busy = in_flight(kind, now).values("request_id")
    rows = kind.model.objects.filter(kind.pending, **{f"{kind.id_field}__in": busy})
    if project_id is not None:
        rows = rows.filter(project_id=project_id)
    counted = rows.order_by().values("project_id").annotate(n=Count("pk")).values_list("project_id", "n")
    return dict(counted)


def in_flight_count(kind: WorkKind, project_id: object, now: datetime) -> int:
    """How many of the project's requests of the kind are in flight."""
    return _in_flight_by_project(kind, now, project_id).get(project_id, 0)


def projects_at_cap(kind: WorkKind, now: datetime) -> list[object]:
    """The projects with as many of the kind's requests in flight as its cap allows."""
    cap = kind.in_flight_per_project
    return [project for project, n in _in_flight_by_project(kind, now).items() if n >= cap]


def due_requests(*, kind: WorkKind, now: datetime, limit: int, project_id: object = None) -> list[str]:
    """Ids of the kind's pending requests to send now, round robin across projects, at most ``limit``: those
    whose ``requested_at`` has passed and that are not in flight, as many of each project's (oldest first) as
    its cap leaves room for, the projects waiting longest first."""
    pending = kind.model.objects.filter(kind.pending)
    if project_id is not None:
        pending = pending.filter(project_id=project_id)
    busy = in_flight(kind, now).values("request_id")
    due = pending.filter(requested_at__lte=now).exclude(**{f"{kind.id_field}__in": busy})
    oldest_first = (*kind.oldest_first, kind.id_field)
    sent = _in_flight_by_project(kind, now, project_id)
    waiting = due.order_by().values("project_id").annotate(oldest=Min("requested_at")).order_by("oldest")
    rows: list[tuple[object, object]] = []
    for project in waiting.values_list("project_id", flat=True):
        room = min(kind.in_flight_per_project - sent.get(project, 0), limit - len(rows))
        if room > 0:
            rows += list(
                due.filter(project_id=project)
                .order_by(*oldest_first)
                .values_list(kind.id_field, "project_id")[:room]
            )
        if len(rows) >= limit:
            break
    return _round_robin(rows)


def _round_robin(rows: list[tuple[object, object]]) -> list[str]:
    """``(request id, project id)`` rows, each project's in their order, as ids taking turns by project."""
    by_project: dict[object, list[object]] = {}
    for request_id, project in rows:
        by_project.setdefault(project, []).append(request_id)
    turns = itertools.zip_longest(*by_project.values())
    return [str(request_id) for turn in turns for request_id in turn if request_id is not None]
