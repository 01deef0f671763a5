"""Celery tasks of the resolver: ids only (R10), idempotent under redelivery (the request id is the key)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="nexum.resolve_context")
def resolve_context(project_id: str, task_id: str, request_id: str, actor: str) -> str:
    """Resolve a task's context; returns the bundle digest. A redelivered message writes nothing twice."""
    from context_app.resolution.services import bundle_resolve

    outcome = bundle_resolve(project_id=project_id, task_id=task_id, request_id=request_id, actor=actor)
    return outcome.resolve.bundle_digest
