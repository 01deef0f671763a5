"""``manage.py nexum_dispatcher [--once] [--interval S]``: send pending requests that nobody works on.

Run one beside the workers in production (a container or a service of its own; see ``nexum.work.dispatch``
for what a pass does). It needs the database and the broker, never a worker. A pass that meets a database
error logs it and the next pass tries again: the dispatcher outlives the outages it exists for. SIGTERM and
SIGINT end the loop after the pass in progress.
"""

from __future__ import annotations

import logging
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from nexum.celery import app
from nexum.work.dispatch import dispatch_due
from nexum.work.leases import DATABASE_ERRORS

logger = logging.getLogger("nexum.work.dispatcher")


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
        stop = threading.Event()
        if not once:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: stop.set())
            logger.info("dispatcher started: a pass every %g s", interval)
        while True:
            self._pass()
            if once or stop.wait(interval):
                break
        if not once:
            logger.info("dispatcher stopped")

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
