"""Issue an API token for an agent or an operator of a project and print its key (shown once; only its
sha256 is kept). The way to give a planner an operator token: ``issue_token --project acme --name planner
--role operator``."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from nexum.core.errors import DomainError
from nexum.core.roles import AGENT, ROLES
from tasks_app.models import Project
from tasks_app.services import agent_token_issue


class Command(BaseCommand):
    help = "Issue an API token (role agent or operator) for a project and print its key once."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--project", required=True, help="the project's slug")
        parser.add_argument("--name", required=True, help="who holds the token (unique in the project)")
        parser.add_argument("--role", choices=ROLES, default=AGENT, help="agent (default) or operator")

    def handle(self, *args, project: str, name: str, role: str, **options):  # type: ignore[no-untyped-def]
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"no project with slug {project!r}")
        try:
            issued = agent_token_issue(
                project_id=str(target.id), name=name, role=role, actor="command:issue_token"
            )
        except DomainError as error:
            field = f" [{error.field}]" if error.field else ""
            raise CommandError(f"{error.code}{field}: {error.message}") from error
        self.stdout.write(f"{role} token for {name} in {target.slug} (shown once): {issued.key}")
