"""Django's ``flush``, allowed past the event log's append-only guard: it wipes the whole database.

Used by test teardown and by operators resetting a development database; nothing else may remove events.
"""

from django.core.management.commands import flush

from nexum.eventstore.maintenance import event_maintenance


class Command(flush.Command):
    def handle(self, **options):  # type: ignore[no-untyped-def]
        with event_maintenance(options["database"]):
            return super().handle(**options)
