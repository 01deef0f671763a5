"""Celery tasks of the verification gate (SPEC V7): ids only, idempotent under redelivery.

Workers acknowledge late (settings): a worker killed while a check runs leaves the message unacknowledged,
the broker redelivers it, and ``completion_run`` re-uses every check run already recorded and runs the rest.
"""

from __future__ import annotations

from celery import shared_task

from verification_app import services


@shared_task(name="nexum.verification.run_completion", acks_late=True, reject_on_worker_lost=True)
def run_completion(request_id: str) -> str:
    """Run a completion request's checks and record the decision; returns the outcome."""
    return services.completion_run(request_id=request_id).outcome
