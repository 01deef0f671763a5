"""Celery tasks of the resolver: ids only (R10), idempotent under redelivery (the request id is the key).

Nothing is recorded before a queued resolve runs, so it is no kind of dispatched work (a caller whose broker
was down got 503 and sends again); it still takes ``WorkTask``'s options: late acknowledgement, database
errors retried with backoff.
"""

from __future__ import annotations

from celery import shared_task

from nexum.work.worker import WorkTask


@shared_task(name="nexum.resolve_context", base=WorkTask)
def resolve_context(project_id: str, task_id: str, request_id: str, actor: str) -> str:
    """Resolve a task's context; returns the bundle digest. A redelivered message writes nothing twice."""
    from context_app.resolution.services.resolves import bundle_resolve

    outcome = bundle_resolve(project_id=project_id, task_id=task_id, request_id=request_id, actor=actor)
    return outcome.resolve.bundle_digest
