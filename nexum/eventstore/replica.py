"""Reads on a streaming replica, with read-your-writes (issue 26 item 3).

With ``NEXUM_READ_DATABASE_URL`` set, the settings add a database alias ``replica``. Writes always go to
``default`` (the primary). A read is sent to the replica only inside ``reading_from(alias)``, which the
read paths enter after ``read_alias`` chose the alias: every ORM read in the block then goes there (the
router below), every write still goes to the primary.

Read-your-writes. A project's events commit in the order of their ``project_position``, so a replica holds
a prefix of each project's log. Each append records the project position it reached (``note_written``);
the web layer returns it as the ``Nexum-Position`` response header and accepts it back as
``Nexum-Min-Position``. ``read_alias`` polls the replica's project head until it reaches that position,
for at most ``NEXUM_REPLICA_WAIT_MS``; when it does not, or the replica cannot be reached, the read goes
to the primary.

A read that fails on the replica once it was chosen (a statement past ``NEXUM_REPLICA_STATEMENT_TIMEOUT_MS``,
say behind a lock the standby replays, a recovery conflict, the standby gone) is read again on the primary:
a compile's read phase by ``read_with_fallback``, any other read request by the web layer, which the error
answer marks (``note_replica_failed``). A read writes nothing, so reading it again is safe.

Which reads. A compile chooses its alias itself (``read_alias`` then ``reading_from``), and so does a
queued compile's worker, with the position of the request it answers (the caller's writes came before it).
Every other read request of the API (GET, HEAD) reads from the replica as a whole: the web layer opens
``tracking_request(reads=True, min_position=…)``, and the authentication, the first to know the caller's
project, calls ``note_caller``, which chooses the alias for the rest of the request. The token itself is
read from the primary (a revoked token is refused at once).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, connections

REPLICA = "replica"
PRIMARY = "default"
POLL_INTERVAL_SECONDS = 0.01

logger = logging.getLogger(__name__)

T = TypeVar("T")

_read_alias: contextvars.ContextVar[str | None] = contextvars.ContextVar("nexum_read_alias", default=None)


class ReadReplicaRouter:
    """Sends reads to the alias chosen by ``reading_from`` (none: the primary); writes and migrations to
    the primary only."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        # Never None: Django would then follow an instance read from the replica back to the replica.
        return current_read_alias()

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return PRIMARY

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True  # the replica is a copy of the primary: the same rows

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == PRIMARY


def replica_configured() -> bool:
    return REPLICA in settings.DATABASES


def current_read_alias() -> str:
    return _read_alias.get() or PRIMARY


@contextlib.contextmanager
def reading_from(alias: str) -> Iterator[None]:
    """Inside the block, ORM reads go to ``alias``."""
    token = _read_alias.set(alias)
    try:
        yield
    finally:
        _read_alias.reset(token)


def read_alias(project_id: str | None, min_position: int = 0) -> str:
    """The alias a read of ``project_id`` should use: the replica once its project head has reached
    ``min_position`` (a project position), waited for at most ``NEXUM_REPLICA_WAIT_MS``; else the primary."""
    if not replica_configured():
        return PRIMARY
    started = time.monotonic()
    deadline = started + settings.NEXUM_REPLICA_WAIT_MS / 1000
    while True:
        try:
            reached = replica_project_position(project_id)
        except DatabaseError as error:
            logger.warning("replica unreachable, reading from the primary: %s", error)
            connections[REPLICA].close()
            return note_read_from(PRIMARY, waited_s=time.monotonic() - started)
        if reached >= min_position:
            return note_read_from(REPLICA, waited_s=time.monotonic() - started)
        if time.monotonic() >= deadline:
            logger.info(
                "replica at project position %s of %s after %s ms, reading from the primary",
                reached,
                min_position,
                settings.NEXUM_REPLICA_WAIT_MS,
            )
            return note_read_from(PRIMARY, waited_s=time.monotonic() - started)
        time.sleep(POLL_INTERVAL_SECONDS)


def read_with_fallback(alias: str, read: Callable[[], T]) -> T:
    """``read()`` inside ``reading_from(alias)``; when ``alias`` is the replica and the read fails there
    with a database error, ``read()`` again on the primary."""
    if alias == REPLICA:
        try:
            with reading_from(REPLICA):
                return read()
        except DatabaseError as error:
            _fall_back(error)
        alias = PRIMARY
    with reading_from(alias):
        return read()


def note_replica_failed(error: BaseException) -> bool:
    """Called with the error a read request is about to be answered with: when it is a database error met
    while reading from the replica, the request is marked to be read again on the primary (``True``)."""
    positions = _request.get()
    if positions is None or not positions.reads or current_read_alias() != REPLICA:
        return False
    if not isinstance(error, DatabaseError):
        return False
    positions.replica_failed = True
    return True


def _fall_back(error: BaseException) -> None:
    """A read failed on the replica: its connection is dropped (the next read connects afresh) and the read
    goes to the primary."""
    logger.warning("a read on the replica failed, reading from the primary: %s", error)
    connections[REPLICA].close()
    note_read_from(PRIMARY)


def replica_project_position(project_id: str | None) -> int:
    """The last project position of ``project_id`` that the replica has replayed."""
    from nexum.eventstore.models import Event

    last = (
        Event.objects.using(REPLICA)
        .filter(project_id=project_id)
        .order_by("-project_position")
        .values_list("project_position", flat=True)
        .first()
    )
    return last or 0


@dataclass
class RequestPositions:
    """What one request wrote (per project, the highest project position committed), where it read from
    (``replica``, ``default``, or None when it chose no alias), how long it waited for the replica to reach
    the caller's position (``replica_wait_s``, checking included) and, for a read request, that position
    (``min_position``)."""

    written: dict[str | None, int] = field(default_factory=dict)
    read_from: str | None = None
    replica_wait_s: float = 0.0
    reads: bool = False
    min_position: int = 0
    replica_failed: bool = False
    """A read on the replica failed: the request is read again on the primary (``retried_on_primary``)."""


_request: contextvars.ContextVar[RequestPositions | None] = contextvars.ContextVar(
    "nexum_request_positions", default=None
)


@contextlib.contextmanager
def tracking_request(*, reads: bool = False, min_position: int = 0) -> Iterator[RequestPositions]:
    """Collects the writes and the read alias of the block (one request). With ``reads``, the request reads
    from the replica once its caller is known (``note_caller``); the alias it chose ends with the block."""
    positions = RequestPositions(reads=reads, min_position=min_position)
    token = _request.set(positions)
    alias_token = _read_alias.set(None)
    try:
        yield positions
    finally:
        _read_alias.reset(alias_token)
        _request.reset(token)


@contextlib.contextmanager
def retried_on_primary(failed: RequestPositions) -> Iterator[RequestPositions]:
    """``tracking_request`` for reading again, on the primary, a read request whose read on the replica
    ``failed``: the replica's connection dropped, the time spent choosing it kept."""
    connections[REPLICA].close()
    with tracking_request(reads=True) as positions:
        note_read_from(PRIMARY, waited_s=failed.replica_wait_s)
        yield positions


def note_caller(project_id: str) -> None:
    """Called by the authentication once it knows the caller's project: a read request (``tracking_request``
    with ``reads``) reads the rest of its way from ``read_alias(project_id, min_position)``."""
    positions = _request.get()
    if positions is None or not positions.reads or positions.read_from is not None:
        return
    if replica_configured():
        _read_alias.set(read_alias(project_id, positions.min_position))


def note_written(project_id: str | None, project_position: int) -> None:
    """Called by ``store.append`` on commit: the caller's write reached ``project_position``."""
    positions = _request.get()
    if positions is not None:
        key = None if project_id is None else str(project_id)
        positions.written[key] = max(positions.written.get(key, 0), project_position)


def note_read_from(alias: str, *, waited_s: float = 0.0) -> str:
    """The request's answer was read from ``alias`` (``Nexum-Read-From``, with a replica configured), after
    ``waited_s`` choosing it."""
    positions = _request.get()
    if positions is not None and replica_configured():
        positions.read_from = alias
        positions.replica_wait_s += waited_s
    return alias


class _ReadConnection:
    """The connection of the alias reads use now (``reading_from``), for the read paths' raw SQL."""

    def __getattr__(self, name: str) -> Any:
        return getattr(connections[current_read_alias()], name)


read_connection = _ReadConnection()
