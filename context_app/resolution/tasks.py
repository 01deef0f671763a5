"""Celery tasks of the resolver: ids only (R10), idempotent under redelivery.

``resolve_requested`` answers one queued resolve under its lease (``nexum.work``), by the id of its request:
the request is recorded before the message is sent, so a message that is lost is sent again by the
dispatcher. ``resolve_context`` takes the messages a release before that sent (nothing recorded), which may
still wait in a broker after an upgrade.
"""

from __future__ import annotations

from celery import shared_task
from django.db.models import Q

from context_app.resolution.models import ResolveRequest
from nexum.core.resolution.events import REQUEST_QUEUED
from nexum.work.kinds import WorkKind
from nexum.work.worker import WorkTask, run_leased


@shared_task(bind=True, base=WorkTask, name="nexum.resolve_requested")
def resolve_requested(self: WorkTask, queued_id: str) -> str | None:
    """Answer the queued resolve ``queued_id``; the bundle's digest, or ``None`` when it was refused. A
    redelivered message (the request already answered) writes nothing."""
    # Imported here: the service imports this module to send its work (services -> tasks, one direction).
    from context_app.resolution.services.resolve_requests import bundle_resolve_run

    answered = run_leased(self, RESOLVE, queued_id, lambda lease: bundle_resolve_run(queued_id=queued_id))
    return answered.bundle_digest or None if answered is not None else None


@shared_task(base=WorkTask, name="nexum.resolve_context")
def resolve_context(project_id: str, task_id: str, request_id: str, actor: str) -> str:
    """A resolve queued by a release before queued resolves were recorded (its message carries the request,
    not a recorded id): recorded now as a queued resolve under the same request id, and answered as any
    other (``resolve_requested``), so it still ends, once, and shows at ``/resolves/{request_id}``. The same
    message again writes nothing. Returns the queued resolve's id."""
    from context_app.resolution.services.resolve_requests import bundle_resolve_request

    queued = bundle_resolve_request(
        project_id=project_id, task_id=task_id, request_id=request_id, actor=actor
    )
    return str(queued.id)


RESOLVE = WorkKind(
    name="resolve",
    task=resolve_requested,
    model=ResolveRequest,
    id_field="id",
    pending=Q(status=REQUEST_QUEUED),
    in_flight_setting="NEXUM_RESOLVE_IN_FLIGHT_PER_PROJECT",
)
