"""Write a project's log and the content it names to stdout, in the export format of docs/EXPORT.md.

manage.py nexum_export PROJECT > project.nexum.jsonl
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from nexum.core.errors import DomainError
from nexum_web.portability import export_lines
from tasks_app import selectors
from tasks_app.management.console import command_error


class Command(BaseCommand):
    help = "Export a project (its events with their chain hashes, then its blobs) as JSON lines on stdout."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("project", help="the project's slug")

    def handle(self, *args: Any, project: str, **options: Any) -> None:
        try:
            target = selectors.project_by_slug(slug=project)
        except DomainError as error:
            raise command_error(error) from error
        for line in export_lines(target):
            self.stdout.write(line)
