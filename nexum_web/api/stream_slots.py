"""How many event streams are open, so that streams can never hold every request thread (issue 23).

An open stream (``nexum_web/api/stream.py``) holds one request thread of the process serving it for as long
as it lasts (at most ``NEXUM_EVENT_STREAM_MAX_S``). Three bounds keep threads for everyone else:

- per token, ``NEXUM_EVENT_STREAMS_PER_TOKEN`` (429 ``too_many_streams``): one agent cannot take the share of
  the others;
- in all, ``NEXUM_EVENT_STREAMS_MAX`` (503 ``streams_at_capacity``): by default the workers × (threads − 1)
  of the gunicorn running it;
- per process, all of its ``NEXUM_WEB_THREADS`` but one (503 ``streams_at_capacity``): gunicorn serves a
  connection with the threads of the worker that accepted it, so a bound in all cannot keep a thread free
  in *every* worker (six streams in all may be four in one worker of four threads); this one can. It is
  counted in memory, since a process's own streams die with it.

The first two are counted across the server's processes in the database, one ``EventStreamLease`` row per
open stream: a stream is admitted under a lock (the table's, on PostgreSQL; SQLite's write lock, which every
transaction takes first), so two processes never both take the last slot. A row is deleted when the stream's
response is closed (its deadline passed, the client went away, the server stopped); if its process died
first, the row stops counting ``LEASE_GRACE_S`` after the stream's deadline. Every refusal carries
``Retry-After``: when the earliest stream that fills the bound will have ended.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from nexum.core.errors import TooMany, Unavailable
from nexum_web.models import EventStreamLease

logger = logging.getLogger(__name__)

# A stream ends within one poll of its deadline; a lease of a process that died counts this much longer.
LEASE_GRACE_S = 5
# When a process's share is taken, a retry soon may reach another process.
PROCESS_RETRY_AFTER_S = 1
HOLDER = f"{socket.gethostname()}:{os.getpid()}"


class TooManyStreams(TooMany):
    code = "too_many_streams"


class StreamsAtCapacity(Unavailable):
    code = "streams_at_capacity"


_process_lock = threading.Lock()
_process_open = 0


class StreamSlot:
    """An admitted stream's place in the bounds, held until ``release`` (which is safe to call twice)."""

    def __init__(self, lease_id: uuid.UUID) -> None:
        self.lease_id = lease_id
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        _process_give_back()
        try:
            EventStreamLease.objects.filter(id=self.lease_id).delete()
        except DatabaseError as error:  # the lease stops counting by itself after its deadline
            logger.warning("the lease of a closed event stream stays until it expires: %s", error)


def stream_slot_take(*, token_id: str, project_id: str, lasts_s: float) -> StreamSlot:
    """A place for a stream of ``token_id`` lasting at most ``lasts_s`` seconds, or ``TooManyStreams`` /
    ``StreamsAtCapacity`` when a bound is reached (nothing is taken then)."""
    _process_take()
    try:
        return StreamSlot(_lease_take(token_id, project_id, lasts_s))
    except BaseException:
        _process_give_back()
        raise


def open_streams() -> int:
    """The streams open now on the whole server (leases still counting)."""
    return _live(timezone.now()).count()


def _process_take() -> None:
    global _process_open
    limit = settings.NEXUM_EVENT_STREAMS_PER_PROCESS
    with _process_lock:
        if limit is not None and _process_open >= limit:
            raise StreamsAtCapacity(
                f"this server process has {_process_open} event streams open, all of its"
                f" {settings.NEXUM_WEB_THREADS} request threads but one; try again after Retry-After",
                details={"open": _process_open, "limit": limit, "retry_after_s": PROCESS_RETRY_AFTER_S},
            )
        _process_open += 1


def _process_give_back() -> None:
    global _process_open
    with _process_lock:
        _process_open -= 1


def _live(now: datetime) -> QuerySet[EventStreamLease]:
    return EventStreamLease.objects.filter(closes_at__gte=now - timedelta(seconds=LEASE_GRACE_S))


def _lease_take(token_id: str, project_id: str, lasts_s: float) -> uuid.UUID:
    now = timezone.now()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f'LOCK TABLE "{EventStreamLease._meta.db_table}" IN EXCLUSIVE MODE')
        EventStreamLease.objects.filter(closes_at__lt=now - timedelta(seconds=LEASE_GRACE_S)).delete()
        live = _live(now)
        mine = live.filter(token_id=token_id)
        limit = settings.NEXUM_EVENT_STREAMS_PER_TOKEN
        if (open_now := mine.count()) >= limit:
            raise TooManyStreams(
                f"this token has {open_now} event streams open, the most it may"
                f" (NEXUM_EVENT_STREAMS_PER_TOKEN={limit}): close one, or open again after Retry-After",
                details={"open": open_now, "limit": limit, "retry_after_s": _until_first_closes(mine, now)},
            )
        limit = settings.NEXUM_EVENT_STREAMS_MAX
        if (open_now := live.count()) >= limit:
            raise StreamsAtCapacity(
                f"the server has {open_now} event streams open, the most it serves at once"
                f" (NEXUM_EVENT_STREAMS_MAX={limit}); open again after Retry-After",
                details={"open": open_now, "limit": limit, "retry_after_s": _until_first_closes(live, now)},
            )
        lease = EventStreamLease.objects.create(
            token_id=token_id,
            project_id=project_id,
            holder=HOLDER,
            opened_at=now,
            closes_at=now + timedelta(seconds=lasts_s),
        )
    return lease.id


def _until_first_closes(leases: QuerySet[EventStreamLease], now: datetime) -> int:
    first = leases.order_by("closes_at").values_list("closes_at", flat=True).first()
    return max(1, math.ceil((first - now).total_seconds())) if first else 1
