"""Import a project export (docs/EXPORT.md) into this installation, where the project has no events yet.

    manage.py nexum_import project.nexum.jsonl

The whole file is checked first (format, the chain, every blob's digest); a refusal names the line and writes
nothing. Then the events are appended as they were, the read models rebuilt, the blobs stored, the project's
tokens revoked, and every stored context replayed to its digest, in one transaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nexum.core.errors import DomainError
from nexum_web.portability import import_lines
from tasks_app.management.console import command_error


class Command(BaseCommand):
    help = "Import a project export into an empty project: verified before anything is written."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the export (JSON lines), as written by nexum_export")

    def handle(self, *args: Any, file: str, **options: Any) -> None:
        path = Path(file)
        if not path.is_file():
            raise CommandError(f"{file}: no such file")
        try:
            with path.open(encoding="utf-8") as lines:
                report = import_lines(lines)
        except DomainError as error:
            raise command_error(error) from error
        except UnicodeDecodeError as error:
            raise CommandError(f"{file}: not UTF-8 text ({error})") from error
        blobs = ", ".join(f"{count} {kind}" for kind, count in report.blobs.items())
        self.stdout.write(
            f"imported project {report.slug} ({report.project_id}): {report.events} events, blobs: {blobs};"
            f" {report.pruned} pruned; {report.replayed} stored contexts replay to their digests;"
            f" {report.tokens_revoked} tokens revoked (issue new ones here)"
        )
