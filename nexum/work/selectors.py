"""Reads of work in flight: the pending requests of every kind, with their lease and pacing.

A request is pending while its read model says so (not decided, still queued); its ``Work`` row, when it has
one, says who holds its lease and when it was last sent. A pending request that no live lease covers and that
is older than a lease's lifetime is stuck: the dispatcher would send it, the dashboard lists it and
``nexum_requeue --stuck`` sends it by hand.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from nexum.ids import uuid_or_none
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
    *, requested_before: datetime | None = None, request_id: object = None, limit: int = 500
) -> list[PendingRequest]:
    """Pending requests of every kind, oldest first (optionally requested before a time, or one by id)."""
    found: list[PendingRequest] = []
    for kind in work_kinds():
        rows = kind.model.objects.filter(kind.pending)
        if requested_before is not None:
            rows = rows.filter(requested_at__lte=requested_before)
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
    """Pending requests older than a lease's lifetime that no live lease covers."""
    now = now or timezone.now()
    older = now - timedelta(seconds=settings.NEXUM_LEASE_TTL_S)
    return [r for r in pending_requests(requested_before=older, limit=limit) if not r.leased(now)]
