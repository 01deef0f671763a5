"""Projects, the tenants (SPEC T0).

    manage.py nexum_project create SLUG [--name NAME] [--description TEXT]
    manage.py nexum_project list

``create`` records the project and loads the default model catalog in one transaction
(``context_app.catalog.services.project_setup``), so the project's first compile finds its model words. It
lives beside ``load_model_catalog`` because it needs both layers: projects below, catalogs here. A taken or
malformed slug, or a blank or over-long name, exits non-zero with the reason, and nothing is written.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from context_app.catalog.selectors import catalog_version
from context_app.catalog.services import project_setup
from nexum.core.errors import DomainError
from tasks_app import selectors
from tasks_app.management.console import command_error, table

ACTOR = "command:nexum_project"


class Command(BaseCommand):
    help = "Create a project (with the default model catalog) or list the projects."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{create,list}")
        create = actions.add_parser("create", help="create a project with the default model catalog")
        create.add_argument(
            "slug", help="1–63 lowercase letters, digits or dashes; names the project in URLs"
        )
        create.add_argument("--name", default=None, help="a display name (default: the slug)")
        create.add_argument("--description", default="", help="what the project is for")
        actions.add_parser("list", help="every project, with its catalog version and active tokens")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "create":
            self.create(options["slug"], options["name"], options["description"])
        else:
            self.list_projects()

    def create(self, slug: str, name: str | None, description: str) -> None:
        try:
            project, catalog = project_setup(
                slug=slug, name=slug if name is None else name, description=description, actor=ACTOR
            )
        except DomainError as error:
            raise command_error(error) from error
        words = ", ".join(sorted(catalog.document.words()))
        self.stdout.write(
            f"created project {project.slug} ({project.name}) with the default model catalog: {words}\n"
            f"next: manage.py nexum_token issue {project.slug} NAME --role operator|agent"
        )

    def list_projects(self) -> None:
        rows = [
            (
                project.slug,
                project.name,
                str(catalog_version(str(project.id))),
                str(project.active_tokens),
                f"{project.created_at:%Y-%m-%d %H:%M:%S %Z}",
            )
            for project in selectors.project_list()
        ]
        self.stdout.write(table(("SLUG", "NAME", "CATALOG VERSION", "ACTIVE TOKENS", "CREATED"), rows))
