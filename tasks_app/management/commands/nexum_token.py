"""API tokens of a project, for its agents and operators (SPEC I2, roles in ``nexum.core.roles``).

    manage.py nexum_token issue PROJECT NAME --role agent|operator   the key on stdout, once
    manage.py nexum_token revoke PROJECT NAME [--reason TEXT]         401 from the next request on
    manage.py nexum_token list PROJECT                                names, roles, key prefixes; never keys

``issue`` prints the key alone on stdout (``KEY=$(manage.py nexum_token issue …)``) and what it did on
stderr. The key is never stored: the token's row and its ``AgentTokenIssued`` event keep its sha256 and its
first eight characters. Every action is an event through ``tasks_app.services.tokens``; a refused input (an
unknown project or token, a taken or malformed name, an unknown role, a token already revoked) exits non-zero
with the reason, and nothing is written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nexum.core.errors import DomainError
from nexum.core.roles import ROLES
from tasks_app import selectors
from tasks_app.management.console import command_error, table
from tasks_app.models import Project
from tasks_app.services.tokens import agent_token_issue, agent_token_revoke

ACTOR = "command:nexum_token"


class Command(BaseCommand):
    help = "Issue, revoke and list a project's API tokens (agents' and operators')."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{issue,revoke,list}")
        issue = actions.add_parser("issue", help="issue a token and print its key once")
        issue.add_argument("project", help="the project's slug")
        issue.add_argument("name", help="who holds the token (unique in the project)")
        issue.add_argument("--role", required=True, choices=ROLES, help="agent or operator")
        revoke = actions.add_parser("revoke", help="revoke a token: refused from the next request on")
        revoke.add_argument("project", help="the project's slug")
        revoke.add_argument("name", help="the token's name")
        revoke.add_argument("--reason", default="revoked by nexum_token", help="recorded in the log")
        listing = actions.add_parser("list", help="the project's tokens (never their keys)")
        listing.add_argument("project", help="the project's slug")

    def handle(self, *args: Any, action: str, project: str, **options: Any) -> None:
        try:
            target = selectors.project_by_slug(slug=project)
            if action == "issue":
                self.issue(target, options["name"], options["role"])
            elif action == "revoke":
                self.revoke(target, options["name"], options["reason"])
            else:
                self.list_tokens(target)
        except DomainError as error:
            raise command_error(error) from error

    def issue(self, project: Project, name: str, role: str) -> None:
        issued = agent_token_issue(project_id=str(project.id), name=name, role=role, actor=ACTOR)
        self.stderr.write(
            f"issued {role} token {name!r} in project {project.slug} (key prefix {issued.token.key_prefix});"
            " its key, on standard output, is shown once and never stored: keep it now"
        )
        self.stdout.write(issued.key)

    def revoke(self, project: Project, name: str, reason: str) -> None:
        token = selectors.token_by_name(project=project, name=name)
        if token.revoked_at is not None:
            raise CommandError(
                f"token {name!r} of project {project.slug} was already revoked ({_when(token.revoked_at)})"
            )
        agent_token_revoke(token_id=str(token.id), reason=reason, actor=ACTOR)
        self.stdout.write(f"revoked {token.role} token {name!r} of project {project.slug}")

    def list_tokens(self, project: Project) -> None:
        rows = [
            (token.name, token.role, token.key_prefix, _when(token.issued_at), _when(token.revoked_at))
            for token in selectors.token_list(project=project)
        ]
        self.stdout.write(table(("NAME", "ROLE", "KEY PREFIX", "ISSUED", "REVOKED"), rows))


def _when(moment: datetime | None) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S %Z}" if moment else "-"
