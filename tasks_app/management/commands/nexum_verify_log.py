"""Walk the log's hash chains and name the first event that does not match (issue 27, ``nexum.core.chain``).

    manage.py nexum_verify_log                   every project's chain (and the events without a project)
    manage.py nexum_verify_log --project SLUG    one project's

Exits 0 when every event links to the one before it and hashes to what it stores; otherwise non-zero, naming
the first event that does not (its position, project, project position and type). Each run is recorded
(``nexum.eventstore.models.LogVerification``) for the admin dashboard, whatever it found.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nexum.core.errors import DomainError
from nexum.eventstore.verification import verify_log
from tasks_app import selectors
from tasks_app.management.console import command_error


class Command(BaseCommand):
    help = "Verify the event log's hash chains; name the first event that does not match."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", help="the project's slug (default: every project)")

    def handle(self, *args: Any, project: str | None = None, **options: Any) -> None:
        if project is None:
            run = verify_log()
        else:
            try:
                target = selectors.project_by_slug(slug=project)
            except DomainError as error:
                raise command_error(error) from error
            run = verify_log(project_id=str(target.id), every_project=False)
        if not run.ok:
            raise CommandError(f"the log's chain is broken at {run.message} ({run.events} events checked)")
        self.stdout.write(f"the log's chain verifies: {run.events} events in {run.projects} project log(s)")
