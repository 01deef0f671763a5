"""``manage.py nexum_requeue --request ID | --stuck``: send pending requests to a worker again, by hand.

``--request`` sends one pending request (a completion or a queued compile) whatever its pacing; ``--stuck``
sends every request the admin dashboard lists as stuck (pending longer than a lease's lifetime, no live
lease). A delivery that finds the request answered, or leased by a live worker, does nothing, so requeueing
is always safe. Without a broker (Celery eager) the request runs here, in this process.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from nexum.work import selectors
from nexum.work.dispatch import requeue


class Command(BaseCommand):
    help = "Send a pending request (--request ID) or every stuck one (--stuck) to a worker again."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--request", metavar="ID", help="the id of a completion or compile request")
        which.add_argument("--stuck", action="store_true", help="every stuck request")

    def handle(self, *args, request=None, stuck=False, **options):  # type: ignore[no-untyped-def]
        if stuck:
            chosen = selectors.stuck_requests()
        else:
            found = selectors.pending_request(request)
            if found is None:
                raise CommandError(f"no pending request {request}: unknown, or already answered")
            chosen = [found]
        failed = []
        for pending in chosen:
            if requeue(pending.kind, str(pending.request_id)):
                self.stdout.write(f"sent {pending.key}")
            else:
                failed.append(pending.key)
        if not chosen:
            self.stdout.write("nothing is stuck")
        if failed:
            raise CommandError(f"the broker is unreachable; not sent: {', '.join(failed)}")
