"""Token authentication (SPEC I2) and roles: one bearer token per agent or operator, scoped to one project.

Roles are enforced once, here: a view lists the operations that need an operator in ``operator_only``
(HTTP method → ``OperatorOnly``), and ``OperatorOnlyOperations`` — a default permission class of every API
view — refuses an agent token on them with 403 ``forbidden`` before the view runs, so nothing is written.
HEAD is answered by the GET handler and so has GET's rule (``nexum_web.api.declarations``).
The OpenAPI schema reads the same declarations (``nexum_web.api.schema``). Every trust class a body may claim
is a ``CallerTrustField``: at most the caller's role's ceiling, and that ceiling when absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.http import HttpRequest
from rest_framework import authentication, exceptions, permissions, serializers
from rest_framework.request import Request

from nexum.core.roles import AGENT, actor_of, caller_trust, require_operator
from nexum.core.trust import TrustClass
from nexum.eventstore import replica
from nexum_web.api.declarations import declared_for
from tasks_app.models import AgentToken
from tasks_app.services.tokens import hash_key

TRUST_CLASS_CHOICES: tuple[str, ...] = tuple(trust.name for trust in TrustClass)
"""The trust classes a body may name, lowest first (``TrustClass``'s order)."""


@dataclass(frozen=True)
class ProjectAgent:
    """The authenticated caller of the API: an agent or an operator (``role``) acting within one project."""

    token_id: str
    name: str
    project_id: str
    role: str

    is_authenticated = True
    is_anonymous = False

    @property
    def actor(self) -> str:
        return actor_of(self.role, self.name)


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer <key>`` (or ``Token <key>``). The token is read from the primary; once the
    caller's project is known, a read request reads the rest of its way from the replica
    (``replica.note_caller``)."""

    keywords = ("bearer", "token")

    def authenticate(self, request: HttpRequest) -> tuple[ProjectAgent, AgentToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("the Authorization header must be 'Bearer <token>'")
        token = (
            AgentToken.objects.filter(key_sha256=hash_key(header[1]), revoked_at__isnull=True)
            .only("id", "name", "project_id", "role")
            .first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("unknown or revoked token")
        replica.note_caller(str(token.project_id))
        return ProjectAgent(str(token.id), token.name, str(token.project_id), token.role), token

    def authenticate_header(self, request: HttpRequest) -> str:
        return 'Bearer realm="nexum"'


class IsProjectAgent(permissions.BasePermission):
    message = "this endpoint needs an agent or operator token"

    def has_permission(self, request: HttpRequest, view: object) -> bool:
        return isinstance(getattr(request, "user", None), ProjectAgent)


@dataclass(frozen=True)
class OperatorOnly:
    """An operation that needs an operator token: ``action`` names it in the refusal. With ``fields``, only a
    request whose body carries one of those members needs one (the rest of the operation is an agent's)."""

    action: str
    fields: tuple[str, ...] = ()


def operator_rule(view: object, method: str) -> OperatorOnly | None:
    """The operator rule ``view`` declares for ``method``, if any (HEAD has GET's)."""
    rule: OperatorOnly | None = declared_for(view, "operator_only", method)
    return rule


class OperatorOnlyOperations(permissions.BasePermission):
    """Refuses an agent token on the operations its view declares in ``operator_only`` (403 ``forbidden``,
    naming what needs an operator, and the body member when the rule is about members). It runs before the
    view: a refused request writes nothing."""

    def has_permission(self, request: Request, view: object) -> bool:
        rule = operator_rule(view, request.method or "")
        if rule is None:
            return True
        field = None
        if rule.fields:
            body = request.data if isinstance(request.data, Mapping) else {}
            field = next((name for name in rule.fields if name in body), None)
            if field is None:
                return True
        require_operator(request.user.role, rule.action, field=field)
        return True


class CallerTrustField(serializers.ChoiceField):
    """The trust class a caller claims for what it writes: any class by name (an unknown one is 400), at most
    its role's ceiling (``nexum.core.roles.caller_trust``: above is 403 ``forbidden``), and the ceiling when
    the body does not say. The caller is the serializer context's ``request``; without one, the agent's
    ceiling applies."""

    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault(
            "help_text",
            "at most your token's ceiling: agent_reported for an agent, repository_authored for an operator"
            " (the default when absent); a higher class is 403",
        )
        super().__init__(choices=TRUST_CLASS_CHOICES, required=False, **kwargs)

    def _role(self) -> str:
        return getattr(getattr(self.context.get("request"), "user", None), "role", AGENT)

    def _path(self) -> str:
        names, field = [], self
        while field is not None:
            if field.field_name:
                names.append(field.field_name)
            field = field.parent
        return ".".join(reversed(names))

    def get_default(self) -> str:
        return caller_trust(None, role=self._role()).name

    def to_internal_value(self, data: object) -> str:
        claimed = super().to_internal_value(data)
        return caller_trust(claimed, role=self._role(), field=self._path()).name
