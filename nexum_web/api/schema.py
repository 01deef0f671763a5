"""The OpenAPI schema says which operations need an operator token, from the same ``operator_only``
declarations ``nexum_web.api.auth.OperatorOnlyOperations`` enforces: the operation's description says so, it
carries ``x-nexum-role: operator`` (or ``x-nexum-operator-fields`` when only some body members need one) and
documents its 403."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema

from nexum.core.roles import OPERATOR
from nexum_web.api.auth import AgentTokenAuthentication, operator_rule


class RoleAwareSchema(AutoSchema):
    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        rule = operator_rule(self.view, self.method)
        if operation is None or rule is None:
            return operation
        if rule.fields:
            members = ", ".join(f"`{name}`" for name in rule.fields)
            note = f"A body with {members} needs an operator token ({rule.action}); an agent token gets 403."
            operation["x-nexum-operator-fields"] = list(rule.fields)
        else:
            note = f"Needs an operator token ({rule.action}); an agent token gets 403 `forbidden`."
            operation["x-nexum-role"] = OPERATOR
        operation["description"] = "\n\n".join(filter(None, [operation.get("description"), note]))
        operation["responses"].setdefault(
            "403", {"description": "forbidden: this operation needs an operator token"}
        )
        return operation


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """The schema's bearer ``securitySchemes`` entry (agent and operator tokens alike), declared by every
    operation that takes a token."""

    target_class = AgentTokenAuthentication
    name = "bearerToken"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "an agent or operator token of one project: `Authorization: Bearer <token>`",
        }
