"""Agent authentication (SPEC I2): one bearer token per agent, scoped to one project."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest
from rest_framework import authentication, exceptions, permissions

from tasks_app.models import AgentToken
from tasks_app.services import hash_key


@dataclass(frozen=True)
class ProjectAgent:
    """The authenticated caller of the agent API: an agent acting within one project."""

    token_id: str
    name: str
    project_id: str

    is_authenticated = True
    is_anonymous = False

    @property
    def actor(self) -> str:
        return f"agent:{self.name}"


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer <key>`` (or ``Token <key>``)."""

    keywords = ("bearer", "token")

    def authenticate(self, request: HttpRequest) -> tuple[ProjectAgent, AgentToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("the Authorization header must be 'Bearer <token>'")
        token = (
            AgentToken.objects.filter(key_sha256=hash_key(header[1]), revoked_at__isnull=True)
            .only("id", "name", "project_id")
            .first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("unknown or revoked token")
        return ProjectAgent(str(token.id), token.name, str(token.project_id)), token

    def authenticate_header(self, request: HttpRequest) -> str:
        return 'Bearer realm="nexum"'


class IsProjectAgent(permissions.BasePermission):
    message = "this endpoint needs an agent token"

    def has_permission(self, request: HttpRequest, view: object) -> bool:
        return isinstance(getattr(request, "user", None), ProjectAgent)
