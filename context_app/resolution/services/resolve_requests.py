"""Queued resolves (R10): a request recorded now (``ContextResolveRequested``) and sent to a worker when its
transaction commits (``tasks.RESOLVE``), and the worker's side that answers it.

The log is the outbox, as for a queued compile or a completion: a broker that is down when the request is
accepted leaves it queued for the dispatcher, and one lost with the broker's queue, or held by a worker that
died, is sent again (``nexum.work.dispatch``). So every accepted request ends answered or failed, once.
"""

from __future__ import annotations

import contextlib

from django.db import transaction

from context_app.resolution.models import ResolveRequest
from context_app.resolution.services.resolves import bundle_resolve, resolvable_task
from context_app.resolution.tasks import RESOLVE
from nexum.core.errors import ConcurrencyError, DomainError, NotFound
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.record import queued_resolve_id
from nexum.core.resolution.validation import validate_resolve_request_id
from nexum.eventstore import store
from nexum.work.dispatch import send_on_commit


def bundle_resolve_request(*, project_id: str, task_id: str, request_id: str, actor: str) -> ResolveRequest:
    """Queue a resolve of ``task_id`` for a worker: records ``ContextResolveRequested`` and sends it when the
    transaction commits. The same ``request_id`` again returns the first request and writes nothing; a goal's
    id is ``ValidationFailed`` and another project's task ``NotFound``, with nothing written."""
    request_id = validate_resolve_request_id(request_id)
    task = resolvable_task(project_id=project_id, task_id=task_id)
    queued_id = queued_resolve_id(project_id=str(project_id), request_id=request_id)
    existing = ResolveRequest.objects.filter(id=queued_id).first()
    if existing is not None:
        return existing
    with transaction.atomic():
        store.append(
            stream_id=resolution_events.resolve_request_stream(queued_id),
            events=[
                resolution_events.ContextResolveRequested(
                    request_id=request_id, task_id=str(task.id), goal_id=str(task.goal_id)
                )
            ],
            expected_version=0,
            idempotency_key=f"resolve-requested-{queued_id}",
            actor=actor,
            project_id=str(project_id),
        )
    send_on_commit(RESOLVE, queued_id)
    return ResolveRequest.objects.get(id=queued_id)


def resolve_request_get(*, project_id: str, request_id: str) -> ResolveRequest:
    """A queued resolve of the caller's project by the request id it was queued under."""
    queued_id = queued_resolve_id(project_id=str(project_id), request_id=request_id)
    found = ResolveRequest.objects.filter(id=queued_id, project_id=project_id).first()
    if found is None:
        raise NotFound(f"no queued resolve {request_id}", field="request_id")
    return found


def bundle_resolve_run(*, queued_id: str) -> ResolveRequest | None:
    """Answer a queued resolve (the worker's side), as its requester: records ``ContextResolveAnswered``
    with the resolve it made, or ``ContextResolveFailed`` with the error a synchronous resolve would have
    answered. Idempotent: a request already answered (a redelivered message) writes nothing, and a run cut
    short between the resolve and its answer finds the resolve made (its request id) and answers with it."""
    queued = ResolveRequest.objects.filter(id=queued_id).first()
    if queued is None or queued.status != resolution_events.REQUEST_QUEUED:
        return queued
    stream_id = resolution_events.resolve_request_stream(str(queued.id))
    try:
        outcome = bundle_resolve(
            project_id=str(queued.project_id),
            task_id=str(queued.task_id),
            request_id=queued.request_id,
            actor=queued.actor,
        )
        answer: resolution_events.ContextResolveAnswered | resolution_events.ContextResolveFailed = (
            resolution_events.ContextResolveAnswered(
                request_id=queued.request_id,
                task_id=str(queued.task_id),
                resolve_id=str(outcome.resolve.id),
                bundle_digest=outcome.resolve.bundle_digest,
            )
        )
    except DomainError as error:
        answer = resolution_events.ContextResolveFailed(
            request_id=queued.request_id,
            task_id=str(queued.task_id),
            code=error.code,
            message=error.message,
            field=error.field,
        )
    with contextlib.suppress(ConcurrencyError):  # answered by another delivery meanwhile
        store.append(
            stream_id=stream_id,
            events=[answer],
            expected_version=queued.version,
            actor=queued.actor,
            project_id=str(queued.project_id),
        )
    return ResolveRequest.objects.get(id=queued_id)
