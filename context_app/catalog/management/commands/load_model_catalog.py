"""Load a model catalog into a project: the default one (``context_app/catalog/fixtures``) or a JSON file.

Idempotent: loading the catalog already in force writes nothing. Goes through the same service as the API,
so an unknown encoding or a catalog that would orphan an overlay word is refused, with nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from context_app.catalog.services import DEFAULT_CATALOG, model_catalog_replace
from nexum.core.errors import DomainError
from tasks_app.management.console import command_error
from tasks_app.models import Project


class Command(BaseCommand):
    help = "Load a model catalog (cards, aliases, tier words) into a project (idempotent)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--project", required=True, help="the project's slug")
        parser.add_argument(
            "--file", default=None, help=f"a catalog JSON document (default: {DEFAULT_CATALOG})"
        )

    def handle(self, *args, project: str, file: str | None = None, **options):  # type: ignore[no-untyped-def]
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"no project with slug {project!r}")
        path = Path(file) if file else DEFAULT_CATALOG
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except OSError as error:
            raise CommandError(f"cannot read {path}: {error}") from error
        except ValueError as error:
            raise CommandError(f"{path} is not JSON: {error}") from error
        try:
            change = model_catalog_replace(
                project_id=str(target.id),
                catalog=document,
                actor="command:load_model_catalog",
                where=f"load_model_catalog {path.name}",
            )
        except DomainError as error:
            raise command_error(error) from error
        words = ", ".join(sorted(change.document.words()))
        state = "loaded" if change.changed else "unchanged"
        self.stdout.write(f"model catalog {state} for {target.slug} (version {change.version}): {words}")
