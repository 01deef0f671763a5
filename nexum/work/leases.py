"""Leases: one process at a time works on a request, and a dead one's work is taken over safely.

A Celery message can be delivered more than once: late acknowledgement redelivers a dead worker's message, a
killed pool process's message is requeued at once, the dispatcher sends a pending request again, an operator
requeues one. Idempotency keys keep the log right (one ``CheckRunRecorded`` per check, one ``GateDecided``
or ``ContextCompiled`` per request); the lease keeps the work right: no check runs twice at the same time.

- A delivery takes the lease of its request (the ``Work`` row ``<kind>:<request id>``) when nobody holds it,
  when the holder's lease expired (not renewed for ``NEXUM_LEASE_TTL_S``), or when the holder is provably
  dead: it ran in this process space (same boot, same pid namespace) and its process is gone (its pid names
  no process, or one started at another time), or it is this very process and no longer running that request
  (a retry after a database error). Otherwise the delivery is ``Busy`` and retries when the lease would
  expire.
- The holder renews the lease every ``NEXUM_LEASE_HEARTBEAT_S`` from a thread. A renewal that finds the lease
  taken kills the check the holder is running.
- Before each check the holder renews and names it; once the sandbox has started it, the check's process
  group and start time are written to the lease (if the lease was lost meanwhile, the check is killed at
  once). A takeover in the same process space kills that group (if its leader is still that process) and
  waits until none of it lives BEFORE running anything; if something survives, the takeover does not run. A
  check recorded in another process space cannot be killed from here: that takeover relies on the sandbox
  ending a check together with its worker process.
- Writes of results are fenced: the transaction that appends a ``CheckRunRecorded`` or ``GateDecided`` first
  updates the lease row where the owner is still this holder; when it is not, ``LeaseLost`` rolls it back
  and the new holder's work stands.
- The lease is deleted when its request is answered, and released (owner cleared) when a run fails.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from nexum.adapters import metrics
from nexum.adapters.sandbox.groups import kill_leftover_group, process_start_ticks
from nexum.work.kinds import WorkKind
from nexum.work.models import Work

logger = logging.getLogger(__name__)

DATABASE_ERRORS = (OperationalError, InterfaceError)


class Busy(Exception):
    """Another live process holds the lease; try again in ``retry_in_s`` seconds."""

    def __init__(self, message: str, retry_in_s: float) -> None:
        super().__init__(message)
        self.retry_in_s = retry_in_s


class LeaseLost(Exception):
    """This process no longer holds the lease (it expired and was taken over): its results are not written."""


INTERRUPTIONS = (LeaseLost, *DATABASE_ERRORS)
"""Errors that stop a run without being its check's failure: the run is retried or handed over."""

NO_CHECK: dict[str, Any] = {"check_name": "", "check_pid": None, "check_started": None}
_held: set[str] = set()
_held_lock = threading.Lock()


@functools.cache
def process_space() -> str:
    """Boot id and pid namespace of this process: two pids compare only when these are equal ("" when the
    platform does not tell, and then no pid is ever compared)."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot_id}/{namespace}"


def _lease_fields(owner: str, now: datetime) -> dict[str, Any]:
    pid = os.getpid()
    return {
        "owner": owner,
        "host": socket.gethostname(),
        "process_space": process_space(),
        "pid": pid,
        "pid_started": process_start_ticks(pid),
        "leased_at": now,
        "expires_at": now + timedelta(seconds=settings.NEXUM_LEASE_TTL_S),
    }


def holder_gone(work: Work) -> bool:
    """True when the process that holds ``work``'s lease provably no longer works on it."""
    if not work.process_space or work.process_space != process_space() or work.pid is None:
        return False
    if work.pid == os.getpid():
        with _held_lock:
            return work.owner not in _held
    return process_start_ticks(work.pid) != work.pid_started


def lease_live(work: Work | None, now: datetime) -> bool:
    """Someone holds the lease and it has not expired (the dispatcher's view: no process checks)."""
    return work is not None and bool(work.owner) and work.expires_at is not None and work.expires_at > now


def acquire(kind: WorkKind, request_id: str) -> Lease:
    """Take the lease of ``request_id`` (raises ``Busy``), killing a leftover check of a dead holder first."""
    key = kind.key(request_id)
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    now = timezone.now()
    with transaction.atomic():
        work = Work.objects.select_for_update().filter(key=key).first()
        if work is None:
            try:
                with transaction.atomic():
                    Work.objects.create(
                        key=key,
                        kind=kind.name,
                        request_id=request_id,
                        project_id=kind.project_of(request_id),
                        **_lease_fields(owner, now),
                    )
            except IntegrityError:  # another delivery created it a moment ago: it holds a fresh lease
                raise Busy(f"{key} was just leased by another delivery", settings.NEXUM_LEASE_TTL_S) from None
            leftover = None
            taken_over = False
        else:
            if lease_live(work, now) and not holder_gone(work):
                assert work.expires_at is not None
                retry_in = (work.expires_at - now).total_seconds() + 1
                raise Busy(f"{key} is leased by {work.owner} until {work.expires_at:%H:%M:%S}", retry_in)
            leftover = work if work.check_pid is not None else None
            taken_over = bool(work.owner)
            Work.objects.filter(key=key).update(
                **_lease_fields(owner, now), takeovers=work.takeovers + (1 if taken_over else 0)
            )
            if taken_over:
                logger.warning("took over %s from %s (lease until %s)", key, work.owner, work.expires_at)
    if taken_over:
        metrics.lease_taken_over(kind=kind.name)
    with _held_lock:
        _held.add(owner)
    lease = Lease(key, owner)
    if leftover is not None:
        lease.kill_leftover_check(leftover)
    lease.start_heartbeat()
    return lease


@contextlib.contextmanager
def held(kind: WorkKind, request_id: str) -> Iterator[Lease]:
    """The lease for the duration of one run: deleted when the run returns (the request is answered),
    released when it raises."""
    lease = acquire(kind, request_id)
    answered = False
    try:
        yield lease
        answered = True
    finally:
        lease.close(answered=answered)


class Lease:
    """A lease this process holds (see the module docstring)."""

    def __init__(self, key: str, owner: str) -> None:
        self.key = key
        self.owner = owner
        self._check: tuple[int, int | None] | None = None
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name=f"lease {key}", daemon=True)

    def _mine(self) -> QuerySet[Work]:
        return Work.objects.filter(key=self.key, owner=self.owner)

    def _renewal(self) -> datetime:
        return timezone.now() + timedelta(seconds=settings.NEXUM_LEASE_TTL_S)

    def kill_leftover_check(self, previous: Work) -> None:
        """Kill the check a dead holder left running, before this process runs anything (see module doc)."""
        assert previous.check_pid is not None
        if previous.process_space != process_space() or not process_space():
            logger.warning(
                "%s: check %r of %s ran on %s, another process space; it ends with its worker process",
                self.key,
                previous.check_name,
                previous.owner,
                previous.host,
            )
            return
        running = process_start_ticks(previous.check_pid) == previous.check_started
        survivors = kill_leftover_group(previous.check_pid, previous.check_started)
        if survivors:
            self.close(answered=False, keep_check=True)
            raise Busy(
                f"{self.key}: processes {survivors} of check {previous.check_name!r} survived SIGKILL",
                settings.NEXUM_LEASE_HEARTBEAT_S,
            )
        if running:
            logger.warning(
                "%s: killed check %r (process group %s) left running by %s",
                self.key,
                previous.check_name,
                previous.check_pid,
                previous.owner,
            )

    def before_check(self, name: str) -> None:
        """Renew the lease and name the check about to start; ``LeaseLost`` if it was taken over."""
        self._check = None
        renewed = self._mine().update(expires_at=self._renewal(), **{**NO_CHECK, "check_name": name})
        if not renewed:
            raise LeaseLost(f"{self.key} was taken over")

    def on_check_start(self, pid: int) -> None:
        """The sandbox started the check as process group ``pid``: record it so a takeover can kill it. If
        the lease is gone, raise: the sandbox kills the group before the error propagates."""
        started = process_start_ticks(pid)
        self._check = (pid, started)
        if not self._mine().update(check_pid=pid, check_started=started):
            raise LeaseLost(f"{self.key} was taken over before check {pid} started")

    def fence(self) -> None:
        """Call first inside the transaction that writes a result: locks the lease row until commit, and
        raises ``LeaseLost`` (rolling the transaction back) unless this process still holds it."""
        if not self._mine().update(expires_at=self._renewal(), **NO_CHECK):
            raise LeaseLost(f"{self.key} was taken over; this run's result is not written")
        self._check = None

    def start_heartbeat(self) -> None:
        self._heartbeat.start()

    def _beat(self) -> None:
        try:
            while not self._stop.wait(settings.NEXUM_LEASE_HEARTBEAT_S):
                try:
                    renewed = self._mine().update(expires_at=self._renewal())
                except DATABASE_ERRORS as error:
                    logger.warning("%s: could not renew the lease: %s", self.key, error)
                    connection.close()
                    continue
                if not renewed and not self._stop.is_set():
                    logger.warning("%s: the lease was taken over; stopping this run's check", self.key)
                    self._kill_own_check()
                    return
        finally:
            connection.close()

    def _kill_own_check(self) -> None:
        check = self._check
        if check is not None:
            kill_leftover_group(*check)

    def close(self, *, answered: bool, keep_check: bool = False) -> None:
        """Stop the heartbeat; delete the lease (``answered``) or release it. Never raises: a lease that
        cannot be written expires, and this process takes its own stale lease over at once."""
        self._stop.set()
        if self._heartbeat.is_alive():
            self._heartbeat.join(timeout=settings.NEXUM_LEASE_HEARTBEAT_S)
        with _held_lock:
            _held.discard(self.owner)
        try:
            if answered:
                self._mine().delete()
            elif keep_check:
                self._mine().update(owner="", expires_at=None)
            else:
                self._mine().update(owner="", expires_at=None, **NO_CHECK)
        except DATABASE_ERRORS as error:
            logger.warning("%s: could not release the lease: %s", self.key, error)
