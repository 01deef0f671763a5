"""Celery tasks of the compile service (C10). They take ids only and are idempotent under redelivery."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="nexum.compile_context")
def compile_requested(request_id: str) -> str | None:
    """Answer the queued compile ``request_id``. A redelivered message (the request already answered)
    stores nothing and appends nothing. Returns the digest, or ``None`` when the compile was refused."""
    from context_app.compilation.services import context_compile_run

    compiled = context_compile_run(request_id=request_id)
    return compiled.digest or None if compiled is not None else None
