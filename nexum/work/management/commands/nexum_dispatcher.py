"""``manage.py nexum_dispatcher [--once] [--interval S]``: send pending requests that nobody works on.

Run one beside the workers in production (a container or a service of its own; see ``nexum.work.dispatch``
for what a pass does). It needs the database and the broker, never a worker. A pass that meets a database
error logs it and the next pass tries again: the dispatcher outlives the outages it exists for.

SIGTERM or SIGINT between passes stops it at once; during a pass, the first lets the pass finish and a second
ends it where it is. Ending a pass midway is safe: its transaction rolls back, a request it sent but did not
pace is sent again by the next pass, and every delivery finds the request answered or leased if it was.
"""

from __future__ import annotations

import logging
import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from config.celery import app
from nexum.work.dispatch import dispatch_due
from nexum.work.leases import DATABASE_ERRORS

logger = logging.getLogger("nexum.work.dispatcher")


class Interrupted(KeyboardInterrupt):
    """Raised by the signal handler to stop at once: a KeyboardInterrupt, so a query in progress is cancelled
    in the server (psycopg does that for a KeyboardInterrupt) and no ``except Exception`` swallows it."""


class Command(BaseCommand):
    help = "Send again every request pending past its lease that no worker is running (the dispatcher loop)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--once", action="store_true", help="make one pass and exit")
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="seconds between passes (default NEXUM_DISPATCH_INTERVAL_S)",
        )

    def handle(self, *args, once=False, interval=None, **options):  # type: ignore[no-untyped-def]
        if app.conf.task_always_eager:
            raise CommandError(
                "CELERY_BROKER_URL is not set: requests run in process when they are made; "
                "run a stuck one with manage.py nexum_requeue"
            )
        interval = settings.NEXUM_DISPATCH_INTERVAL_S if interval is None else interval
        if interval <= 0:
            raise CommandError("--interval must be positive")
        if once:
            self._pass()
            return
        self.signals_received = 0
        self.between_passes = False
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        try:
            logger.info("dispatcher started: a pass every %g s", interval)
            while not self.signals_received:
                self._pass()
                self._wait(interval)
            self._stop_listening()
        except Interrupted:
            if not self.between_passes:
                logger.info("dispatcher stopped during a pass: the next pass does what it had not done")
        logger.info("dispatcher stopped")

    def _on_signal(self, signum: int, frame: object) -> None:
        """Count the signal and raise ``Interrupted`` when the dispatcher should stop now; nothing else.

        A handler runs in the main thread between two of its bytecodes, possibly inside a lock's critical
        section or inside this handler's previous run, so it must take no lock: a ``threading.Event.set()``
        here deadlocked when a second SIGTERM arrived while the first one's ``set()`` held the event's lock
        (``deploy/serve.sh`` then sent every process two)."""
        self.signals_received += 1
        if self.between_passes or self.signals_received > 1:
            self._stop_listening()
            raise Interrupted

    @staticmethod
    def _stop_listening() -> None:
        """Once it stops, further signals change nothing: ignored by the kernel, not by a Python handler,
        which the interpreter resets to the default (terminate) while it exits, so a second SIGTERM then would
        end the process with the signal's status instead of 0."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)

    def _wait(self, interval: float) -> None:
        """Sleep until the next pass; a signal meanwhile (or one that came during the pass) ends it."""
        self.between_passes = True
        if self.signals_received:
            return
        time.sleep(interval)
        self.between_passes = False

    def _pass(self) -> None:
        try:
            done = dispatch_due()
        except DATABASE_ERRORS as error:
            logger.warning("dispatcher pass failed, retrying next pass: %s", error)
            connection.close()
            return
        for key in done.sent:
            self.stdout.write(f"sent {key}")
        for key in done.failed:
            self.stdout.write(f"broker unreachable, will retry: {key}")
