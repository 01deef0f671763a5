"""Celery tasks of the verification gate (SPEC V7): ids only, idempotent under redelivery.

``run_completion`` answers one completion request under its lease (``nexum.work``): a redelivered message
re-uses every check run already recorded and runs only the rest, never while another live process runs the
request, and after killing a check that a dead worker process left running.
"""

from __future__ import annotations

from celery import shared_task
from django.db.models import Q

from nexum.work.kinds import WorkKind
from nexum.work.worker import WorkTask, run_leased
from verification_app.models import CompletionRequest


@shared_task(bind=True, base=WorkTask, name="nexum.verification.run_completion")
def run_completion(self: WorkTask, request_id: str) -> str | None:
    """Run a completion request's checks and record the decision; returns the outcome."""
    from verification_app.services.completion_runs import completion_run  # services import this module

    request = run_leased(
        self, COMPLETION, request_id, lambda lease: completion_run(request_id=request_id, lease=lease)
    )
    return None if request is None else request.outcome


COMPLETION = WorkKind(
    name="completion",
    task=run_completion,
    model=CompletionRequest,
    id_field="id",
    pending=Q(decided=False),
    in_flight_setting="NEXUM_COMPLETION_IN_FLIGHT_PER_PROJECT",
)
