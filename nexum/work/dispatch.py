"""Sending requests to workers: the log is the outbox.

A request is first committed to the log (``CompletionRequested``, ``ContextCompileRequested``); only then is a
message published, carrying the request id alone. Publishing is never what makes a request exist, so a
broker that is down when a request is accepted costs nothing but time: the failed publish is logged (never a
500), the request stays pending in its read model, and the dispatcher sends it.

The dispatcher (``manage.py nexum_dispatcher``) passes every ``NEXUM_DISPATCH_INTERVAL_S`` over the pending
requests of every kind (``NEXUM_WORK_KINDS``): a request pending for ``NEXUM_DISPATCH_AFTER_S`` that no live
lease covers is sent again; each further send of the same request waits twice as long as the one before, up
to ``NEXUM_DISPATCH_BACKOFF_MAX_S``. A send that fails (broker down) does not count and ends the pass (the
broker is down for the others too); the next pass tries again. So a request lost with a broker's queue, or
held by a worker that died, is sent again within about the lease's lifetime plus the backoff cap after the
broker or a worker is back. Extra sends are harmless: a delivery finds the request answered, or its lease
live, and does nothing. Two dispatchers only send more often.

Run in process (no broker, Celery eager), sending a request runs it here, now: ``send_on_commit`` does not
wait for a commit, so the service that recorded the request answers with its outcome.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from nexum.core.errors import Unavailable
from nexum.work import selectors
from nexum.work.kinds import WorkKind, work_kinds
from nexum.work.leases import lease_live
from nexum.work.models import Work

logger = logging.getLogger(__name__)


class BrokerUnavailable(Unavailable):
    code = "broker_unavailable"


def publish(task: Any, *, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> bool:
    """Send ``task`` a message; False when the broker cannot be reached (logged with its cause). In process
    (eager) the task runs now and its errors propagate."""
    if task.app.conf.task_always_eager:
        task.apply_async(args=args, kwargs=kwargs)
        return True
    try:
        task.apply_async(args=args, kwargs=kwargs)
    except Exception as error:  # whatever the broker's client raises: the caller decides what it means
        logger.warning("could not send %s%s to the broker: %s", task.name, args or kwargs, error)
        return False
    return True


def send(kind: WorkKind, request_id: str) -> bool:
    """Send one request of ``kind`` to a worker; False when the broker is down (the request stays pending)."""
    return publish(kind.task, args=(str(request_id),))


def send_on_commit(kind: WorkKind, request_id: str) -> None:
    """Send the request once the transaction that recorded it commits (at once outside a transaction): the one
    way a service hands work to a worker.

    In process (Celery eager) there is no worker to wait for: the request runs now, in this transaction, which
    sees the row it just recorded (a caller's outer transaction included), so the caller can answer with the
    outcome."""
    from django.db import transaction

    if kind.task.app.conf.task_always_eager:
        send(kind, request_id)
    else:
        transaction.on_commit(lambda: send(kind, request_id))


@dataclass
class DispatchPass:
    """What one pass did, by request key."""

    sent: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cleaned: int = 0


def dispatch_due(*, now: datetime | None = None, limit: int = 500) -> DispatchPass:
    """One pass of the dispatcher (see the module docstring)."""
    now = now or timezone.now()
    outcome = DispatchPass()
    after = timedelta(seconds=settings.NEXUM_DISPATCH_AFTER_S)
    for request in selectors.pending_requests(requested_before=now - after, limit=limit):
        work = request.work
        if lease_live(work, now) or (work is not None and work.next_send_at and work.next_send_at > now):
            continue
        if not requeue(request.kind, str(request.request_id), now=now):
            outcome.failed.append(request.key)
            break  # the broker is down for the others too: the next pass tries again
        outcome.sent.append(request.key)
    outcome.cleaned = forget_answered(now=now)
    return outcome


def requeue(kind: WorkKind, request_id: str, *, now: datetime | None = None) -> bool:
    """Send a pending request again and pace its next send; False when the broker is down."""
    now = now or timezone.now()
    if not send(kind, request_id):
        return False
    if kind.task.app.conf.task_always_eager:
        return True  # it ran here and then: nothing to pace
    key = kind.key(request_id)
    sends = (Work.objects.filter(key=key).values_list("sends", flat=True).first() or 0) + 1
    wait = min(settings.NEXUM_DISPATCH_AFTER_S * 2 ** (sends - 1), settings.NEXUM_DISPATCH_BACKOFF_MAX_S)
    paced = {"sends": sends, "sent_at": now, "next_send_at": now + timedelta(seconds=wait)}
    if not Work.objects.filter(key=key).update(**paced):
        Work.objects.bulk_create(
            [Work(key=key, kind=kind.name, request_id=request_id, **paced)], ignore_conflicts=True
        )
    return True


def forget_answered(*, now: datetime) -> int:
    """Delete the rows of requests that are no longer pending and that no live lease holds (a holder that
    could not delete its row when it answered, or pacing left from the last send)."""
    deleted = 0
    for kind in work_kinds():
        pending = kind.model.objects.filter(kind.pending).values(kind.id_field)
        stale = Work.objects.filter(kind=kind.name).exclude(request_id__in=pending)
        deleted += stale.filter(Q(owner="") | Q(expires_at__lte=now)).delete()[0]
    return deleted
