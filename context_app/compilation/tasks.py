"""Celery tasks of the compile service (C10). They take ids only and are idempotent under redelivery.

``compile_requested`` answers one queued compile under its lease (``nexum.work``). Its result needs no fence:
the compile and its ``ContextCompiled`` are one transaction appended at the request stream's queued version,
so of two runs exactly one is recorded.

``retention_run`` runs one recorded retention run of a project (``retention``): the dispatcher's pass records
them every ``NEXUM_RETENTION_INTERVAL_S`` (``prepare``) and sends them, one per project at a time. A second
run of the same request finds what it pruned already pruned and appends nothing more.
"""

from __future__ import annotations

from celery import shared_task
from django.db.models import Q

from context_app.compilation import retention
from context_app.compilation.models import RETENTION_PENDING, ContextCompilation, RetentionRun
from nexum.core.compilation.events import REQUEST_QUEUED
from nexum.work.kinds import WorkKind
from nexum.work.worker import WorkTask, run_leased


@shared_task(bind=True, base=WorkTask, name="nexum.compile_context")
def compile_requested(self: WorkTask, request_id: str) -> str | None:
    """Answer the queued compile ``request_id``. A redelivered message (the request already answered)
    stores nothing and appends nothing. Returns the digest, or ``None`` when the compile was refused."""
    # Imported here: the service imports this module to send its work (services -> tasks, one direction).
    from context_app.compilation.services.requests import context_compile_run

    compiled = run_leased(self, COMPILE, request_id, lambda lease: context_compile_run(request_id=request_id))
    return compiled.digest or None if compiled is not None else None


COMPILE = WorkKind(
    name="compile",
    task=compile_requested,
    model=ContextCompilation,
    id_field="request_id",
    pending=Q(status=REQUEST_QUEUED),
    in_flight_setting="NEXUM_COMPILE_IN_FLIGHT_PER_PROJECT",
)


@shared_task(bind=True, base=WorkTask, name="nexum.retention_run")
def retention_run(self: WorkTask, run_id: str) -> str | None:
    """Run the recorded retention run ``run_id``; its state afterwards."""
    return run_leased(self, RETENTION, run_id, lambda lease: retention.retention_run_execute(run_id=run_id))


RETENTION = WorkKind(
    name="retention",
    task=retention_run,
    model=RetentionRun,
    id_field="id",
    pending=Q(state=RETENTION_PENDING),
    prepare=retention.retention_runs_record,
    in_flight_setting="NEXUM_RETENTION_IN_FLIGHT_PER_PROJECT",
)
