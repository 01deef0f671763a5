"""Sending requests to workers: the log is the outbox.

A request is first committed to the log (``CompletionRequested``, ``ContextCompileRequested``); only then is a
message published, carrying the request id alone. Publishing is never what makes a request exist, so a
broker that is down when a request is accepted costs nothing but time: the failed publish is logged (never a
500), the request stays pending in its read model, and the dispatcher sends it.

Fair across projects: at most ``WorkKind.in_flight_per_project`` of one project's requests of a kind are in
flight at a time (sent and not yet answered: leased, or sent and not yet due to be sent again). A request is
sent when it is recorded only while its project has room (``send_on_commit``); the others wait their turn in
the log. A worker that finishes one sends the next of its project at once (``send_next``), and the dispatcher
sends any project's due requests that its cap leaves room for. So another project's request waits behind at
most the cap of each project's, never behind a whole backlog. Where a kind's messages are queued is Celery's
routing (``CELERY_TASK_ROUTES``: a queue per kind, each with a worker pool of its own).

The dispatcher (``manage.py nexum_dispatcher``) passes every ``NEXUM_DISPATCH_INTERVAL_S`` over the pending
requests of every kind (``config.bootstrap.WORK_KINDS``), each kind on its own (at most ``limit`` sends per
kind and pass, the projects taking turns, the projects waiting longest first): a pending request that is due
(its ``requested_at`` has passed) and not in flight is sent, so one whose send failed is sent at the next
pass, and one sent but not picked up (lost with the broker's queue, or held by a worker that died) once its
pacing and lease have lapsed: a send waits ``NEXUM_DISPATCH_AFTER_S`` before the request may be sent again,
each further send of the same request twice as long as the one before, up to ``NEXUM_DISPATCH_BACKOFF_MAX_S``.
A send that fails (broker down) does not count and ends the pass (the broker is down for the others too); the
next pass tries again. So a request lost with a broker's queue, or held by a worker that died, is sent again
within about the lease's lifetime plus the backoff cap after the broker or a worker is back. Extra sends are
harmless: a delivery finds the request answered, or its lease live, and does nothing. Two dispatchers only
send more often.

Run in process (no broker, Celery eager), sending a request runs it here, now: ``send_on_commit`` does not
wait for a commit, so the service that recorded the request answers with its outcome.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from nexum.work import selectors
from nexum.work.kinds import WorkKind, work_kinds
from nexum.work.models import Work

logger = logging.getLogger(__name__)


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
    """Send the request once the transaction that recorded it commits (at once outside a transaction), if its
    project has room under the kind's cap (otherwise it waits its turn): the one way a service hands work to a
    worker.

    In process (Celery eager) there is no worker to wait for: the request runs now, in this transaction, which
    sees the row it just recorded (a caller's outer transaction included), so the caller can answer with the
    outcome."""
    if kind.task.app.conf.task_always_eager:
        send(kind, request_id)
    else:
        transaction.on_commit(lambda: send_if_room(kind, request_id))


def send_if_room(kind: WorkKind, request_id: str, *, now: datetime | None = None) -> bool:
    """Send a pending request if fewer than the kind's cap of its project's are in flight; False when it
    waits its turn or the broker is down (then ``send_next`` or the dispatcher sends it)."""
    now = now or timezone.now()
    rows = kind.model.objects.filter(kind.pending, **{kind.id_field: request_id})
    project_id = rows.values_list("project_id", flat=True).first()
    if project_id is None:
        return False  # answered already
    if selectors.in_flight_count(kind, project_id, now) >= kind.in_flight_per_project:
        return False
    return requeue(kind, request_id, now=now)


@dataclass
class DispatchPass:
    """What one pass did, by request key."""

    sent: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cleaned: int = 0


def dispatch_due(*, now: datetime | None = None, limit: int = 500) -> DispatchPass:
    """One pass of the dispatcher (see the module docstring): at most ``limit`` sends per kind."""
    now = now or timezone.now()
    outcome = DispatchPass()
    kinds = work_kinds()
    for kind in kinds:
        if kind.prepare is not None:
            kind.prepare(now=now)
    for kind in kinds:
        if not _send_due(kind, selectors.due_requests(kind=kind, now=now, limit=limit), now, outcome):
            break  # the broker is down for the others too: the next pass tries again
    outcome.cleaned = forget_answered(now=now)
    return outcome


def send_next(kind: WorkKind, project_id: object, *, now: datetime | None = None) -> DispatchPass:
    """Send the next due request of one project of ``kind``, if its cap leaves room: what a worker does when
    it has finished one (the slot it held is free), so a backlog drains at the workers' pace, not the
    dispatcher's. One at most: a slot left free otherwise (a failed send) is the next pass's to fill."""
    now = now or timezone.now()
    outcome = DispatchPass()
    due = selectors.due_requests(kind=kind, now=now, limit=1, project_id=project_id)
    _send_due(kind, due, now, outcome)
    return outcome


def _send_due(kind: WorkKind, request_ids: list[str], now: datetime, outcome: DispatchPass) -> bool:
    """Send each request in turn; False when the broker is down (the rest wait for the next pass)."""
    for request_id in request_ids:
        if not requeue(kind, request_id, now=now):
            outcome.failed.append(kind.key(request_id))
            return False
        outcome.sent.append(kind.key(request_id))
    return True


def requeue(kind: WorkKind, request_id: str, *, now: datetime | None = None) -> bool:
    """Send a pending request again and pace its next send; False when the broker is down (and the send is
    not counted).

    The pacing is recorded before the message is published: a worker fast enough to answer the request before
    a pacing written afterwards would otherwise leave a row behind that counts as in flight."""
    now = now or timezone.now()
    if kind.task.app.conf.task_always_eager:
        return send(kind, request_id)  # it runs here and now: nothing to pace
    key = kind.key(request_id)
    before = Work.objects.filter(key=key).values("sends", "sent_at", "next_send_at").first()
    sends = (before["sends"] if before else 0) + 1
    wait = min(settings.NEXUM_DISPATCH_AFTER_S * 2 ** (sends - 1), settings.NEXUM_DISPATCH_BACKOFF_MAX_S)
    paced = {"sends": sends, "sent_at": now, "next_send_at": now + timedelta(seconds=wait)}
    if not Work.objects.filter(key=key).update(**paced):
        Work.objects.bulk_create(
            [
                Work(
                    key=key,
                    kind=kind.name,
                    request_id=request_id,
                    project_id=kind.project_of(request_id),
                    **paced,
                )
            ],
            ignore_conflicts=True,
        )
    if send(kind, request_id):
        return True
    if before is None:
        Work.objects.filter(key=key, owner="").delete()
    else:
        Work.objects.filter(key=key).update(**before)
    return False


def forget_answered(*, now: datetime) -> int:
    """Delete the rows of requests that are no longer pending and that no live lease holds (a holder that
    could not delete its row when it answered, or pacing left from the last send)."""
    deleted = 0
    for kind in work_kinds():
        pending = kind.model.objects.filter(kind.pending).values(kind.id_field)
        stale = Work.objects.filter(kind=kind.name).exclude(request_id__in=pending)
        deleted += stale.filter(Q(owner="") | Q(expires_at__lte=now)).delete()[0]
    return deleted
