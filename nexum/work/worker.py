"""The worker's side of work in flight: the Celery options of a task that answers a request, and a run under
the request's lease.

Celery's documentation on reliability, applied to tasks that are idempotent (every write has an idempotency
key) and must not be lost:

- ``acks_late``: the message is acknowledged after the run, so a worker that dies mid-run leaves it
  unacknowledged on the broker (Redis keeps it until the visibility timeout; see settings).
- ``reject_on_worker_lost``: when a prefork pool process dies mid-run, its message is requeued at once
  instead of acknowledged; the redelivery finds the dead process's lease, kills the check it left running
  and runs again.
- ``acks_on_failure_or_timeout = False``: a run that fails is not acknowledged as done; the message is
  rejected without requeue (on Redis that removes it; with AMQP it goes to a dead-letter exchange) and the
  request stays pending in the log, where the dispatcher finds it.
- Database errors (``OperationalError``, ``InterfaceError``) are retried with exponential backoff
  (``autoretry_for``, ``retry_backoff``: 1, 2, 4 … s up to ``NEXUM_TASK_RETRY_BACKOFF_MAX_S``), after the
  broken connection is closed; they are never acknowledged as done. Without jitter: Celery's full jitter draws
  each wait between 0 and its bound, and was seen spending all eight retries within 3 s of a 5 s outage; the
  plain schedule spans a known stretch of outage (about two minutes with the defaults), after which the
  dispatcher keeps sending the request. A retry in the same process takes its own stale lease over at once.

A run that ends sends its project's next due request of its kind (``nexum.work.dispatch.send_next``): the
slot it held under the kind's cap per project is free.

A delivery that finds the lease held by a live process retries when that lease would expire (counted with
the other retries; after the last one the dispatcher still sends the request while it is pending). Run in
process (Celery eager: the embedded default, tests), a request runs once inside the call that recorded it,
with no broker to redeliver it. No lease is taken, unless the process runs the embedded dispatcher
(``nexum.work.embedded``: the server of the embedded default), which runs a request whose process died: then
a run outside a transaction takes its lease as a worker's does, so that dispatcher never takes a request a
live run holds (a run inside a caller's transaction recorded nothing others can see before it commits). An
in-process run sends no next request: nothing waits behind a cap there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from celery import Task
from django.conf import settings
from django.db import connection

from nexum.work import leases
from nexum.work.dispatch import send_next
from nexum.work.embedded import embedded_dispatcher_active
from nexum.work.kinds import WorkKind

logger = logging.getLogger(__name__)

Result = TypeVar("Result")


class WorkTask(Task):  # type: ignore[misc]
    """Base class of the tasks that answer a request (``shared_task(base=WorkTask, bind=True)``)."""

    acks_late = True
    reject_on_worker_lost = True
    acks_on_failure_or_timeout = False
    autoretry_for = leases.DATABASE_ERRORS
    retry_backoff = True
    retry_backoff_max = settings.NEXUM_TASK_RETRY_BACKOFF_MAX_S
    retry_jitter = False
    max_retries = settings.NEXUM_TASK_MAX_RETRIES


def run_leased(
    task: Any, kind: WorkKind, request_id: str, run: Callable[[leases.Lease | None], Result]
) -> Result | None:
    """Run ``run(lease)`` for one request under its lease (``run(None)`` in process); ``None`` when the lease
    was lost midway (the new holder answers the request)."""
    if task.request.is_eager and not (embedded_dispatcher_active() and not connection.in_atomic_block):
        return run(None)
    try:
        with leases.held(kind, request_id) as lease:
            result = run(lease)
    except leases.Busy as busy:
        if task.request.is_eager:  # a live process runs it; nothing here to retry with
            logger.info("%s; left to it", busy)
            return None
        logger.info("%s; retrying in %.0f s", busy, busy.retry_in_s)
        raise task.retry(countdown=busy.retry_in_s) from None
    except leases.LeaseLost as lost:
        logger.warning("%s", lost)
        return None
    except leases.DATABASE_ERRORS:
        connection.close()  # a broken connection is not reused by the retry
        raise
    if not task.request.is_eager:  # in process nothing waits behind a cap: each request ran when recorded
        _send_next_of_project(kind, request_id)
    return result


def _send_next_of_project(kind: WorkKind, request_id: str) -> None:
    """This run's slot of its project is free (its lease is gone): send the project's next due request now.
    A failure here only leaves that to the dispatcher's next pass."""
    rows = kind.model.objects.filter(**{kind.id_field: request_id})
    project_id = rows.values_list("project_id", flat=True).first()
    if project_id is None:
        return
    try:
        send_next(kind, project_id)
    except leases.DATABASE_ERRORS as error:
        logger.warning(
            "%s: could not send the next request of project %s: %s", kind.key(request_id), project_id, error
        )
