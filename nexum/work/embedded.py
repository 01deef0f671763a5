"""The embedded dispatcher: the embedded default (``make run``: no broker, Celery eager) never leaves a
request pending for good.

Without a broker a completion or a queued compile runs in the process that recorded it, right after
recording it. If that process dies meanwhile (stopped, killed, restarted by the autoreloader), the request
is committed as pending and nothing would ever run it: there is no broker to redeliver it and no dispatcher
(``nexum_dispatcher`` needs a broker). So the server's process runs this one, in a daemon thread started
with its WSGI application (``config/wsgi.py``, which ``runserver`` and gunicorn load): at start and then every
``NEXUM_DISPATCH_INTERVAL_S`` it runs here every request left pending, one after another.

Left pending means: pending in its read model (a kind whose requests come from an API call; webhook
deliveries are the broker's dispatcher's), and either leased by a process that is provably gone or whose
lease expired, or unleased and older than a lease's lifetime (its recorder died before it began). While this
dispatcher runs, a request run in process takes its lease as a worker would (``nexum.work.worker``), so a
request a live thread or another embedded process is running is never taken from it, and a run taken over
from a dead process kills the check that process left behind first. ``NEXUM_EMBEDDED_DISPATCHER=0`` turns
it off (``nexum_requeue --stuck`` then does the same by hand).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from config.celery import app
from nexum.work import selectors
from nexum.work.leases import DATABASE_ERRORS, holder_gone, lease_live
from nexum.work.selectors import PendingRequest

logger = logging.getLogger("nexum.work.dispatcher")

_start_lock = threading.Lock()
_started = threading.Event()


def embedded_dispatcher_active() -> bool:
    """Whether this process runs the embedded dispatcher (then in-process runs take their lease)."""
    return _started.is_set()


def start_embedded_dispatcher() -> bool:
    """Start the embedded dispatcher's thread in this process, once, under the embedded default only (no
    broker) and unless ``NEXUM_EMBEDDED_DISPATCHER`` is off; True when it was started now."""
    if not settings.NEXUM_EMBEDDED_DISPATCHER or not app.conf.task_always_eager:
        return False
    with _start_lock:
        if _started.is_set():
            return False
        _started.set()
    threading.Thread(target=_run_forever, name="nexum-embedded-dispatcher", daemon=True).start()
    logger.info("embedded dispatcher started: a pass every %g s", settings.NEXUM_DISPATCH_INTERVAL_S)
    return True


def left_pending(*, now: datetime | None = None, limit: int = 500) -> list[PendingRequest]:
    """The requests the embedded dispatcher runs now (see the module docstring), oldest first."""
    now = now or timezone.now()
    recorded_before = now - timedelta(seconds=settings.NEXUM_LEASE_TTL_S)
    chosen = []
    for pending in selectors.pending_requests(limit=limit):
        if pending.kind.prepare is not None:
            continue
        work = pending.work
        if work is not None and work.owner:
            if lease_live(work, now) and not holder_gone(work):
                continue  # a live process runs it
        elif pending.requested_at > recorded_before:
            continue  # just recorded: the call that recorded it is about to run it
        chosen.append(pending)
    return chosen


def dispatch_left_pending(*, now: datetime | None = None) -> list[str]:
    """One pass: run each request left pending, here and now; the keys of those run."""
    ran = []
    for pending in left_pending(now=now):
        logger.warning("running %s, left pending (its process is gone)", pending.key)
        try:
            pending.kind.task.apply_async(args=(str(pending.request_id),))
        except DATABASE_ERRORS:
            raise  # the database is down for the others too: the next pass tries again
        except Exception:  # one request's failure must not keep the others pending; the next pass retries it
            logger.exception("%s: the run failed; it stays pending", pending.key)
            continue
        ran.append(pending.key)
    return ran


def _run_forever() -> None:
    while True:
        try:
            dispatch_left_pending()
        except DATABASE_ERRORS as error:
            logger.warning("embedded dispatcher pass failed, retrying next pass: %s", error)
            connection.close()
        except Exception:  # a pass that fails must not end the thread: the next pass tries again
            logger.exception("embedded dispatcher pass failed")
            connection.close()
        time.sleep(settings.NEXUM_DISPATCH_INTERVAL_S)
