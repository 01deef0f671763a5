"""The OpenAPI schema says what the server does, from the declarations the server enforces:

- the operations that need an operator token, from the ``operator_only`` declarations
  ``nexum_web.api.auth.OperatorOnlyOperations`` enforces: the operation's description says so, it carries
  ``x-nexum-role: operator`` (or ``x-nexum-operator-fields`` when only some body members need one);
- the query parameters, from the ``query_serializers`` declarations ``nexum_web.api.strict.DeclaredQueryOnly``
  enforces (nothing else is accepted);
- every request body of a ``StrictInput`` is ``additionalProperties: false``, its rules across members
  (``exclusive``, ``requires_one_of``) under ``allOf`` beside its typed members, so that a generated client
  still types the body;
- every operation is named in ``OPERATION_IDS`` as the Python client (``clients/python``) names its method,
  never by drf-spectacular's default (``v1_tasks_start_create``): an operation missing there fails the
  schema's generation;
- every operation's error responses, each in the one error shape (``Error``): 400 (any bad input, an
  unknown query parameter included), 401, 404 and 503 (the database unreachable) for every operation that
  takes a token, 403 for an operator's operation or a body with a trust class, 409 and 413 for every write,
  and what a view declares in ``error_statuses`` beyond those (422 refused by policy, 429 too many open).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import force_instance, get_doc
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

from nexum.core.roles import OPERATOR
from nexum.core.text import NOT_BLANK
from nexum_web.api.auth import AgentTokenAuthentication, CallerTrustField, operator_rule
from nexum_web.api.positions import MIN_POSITION_PARAMETER, READ_METHODS
from nexum_web.api.stream_tickets import TICKET_PARAMETER, StreamTicketAuthentication
from nexum_web.api.strict import StrictInput, blank_refused, query_serializer

ERROR = inline_serializer(
    "Error",
    {
        "error": inline_serializer(
            "ErrorDetail",
            {
                "code": serializers.CharField(help_text="stable: see the README's table of codes"),
                "message": serializers.CharField(),
                "field": serializers.CharField(allow_null=True, help_text="the input at fault, if one is"),
                "details": serializers.DictField(),
                "request_id": serializers.CharField(allow_null=True, help_text="the X-Request-ID"),
            },
        )
    },
)

ERROR_MEANINGS = {
    400: "bad input: malformed, unknown member or parameter, wrong type, out of range",
    401: "no token, or an unknown or revoked one",
    403: "forbidden to this token (an operator's operation, or a trust class above its ceiling)",
    404: "not found in the token's project",
    409: "conflicts with the current state (version, transition, idempotency key, existing name)",
    413: "the request body or a member of it is too large",
    422: "well formed but refused by policy",
    429: "too many open at once for this token (event streams); Retry-After says when to try again",
    503: "a service it needs (the database, the broker, a share of the server) is unavailable; nothing was"
    " written; Retry-After says when to try again",
}
WRITES = {"POST", "PUT", "PATCH", "DELETE"}


API_PREFIX = "/api/v1"
# Each operation's id, by method and path under /api/v1: the Python client's method name where it has one
# (``start``, ``record_fact``, ``compile``, ``complete``), else in its style — a noun for what one reads
# (``goal``, ``tasks``), a verb and a noun for what one does (``verify_fact``, ``create_source``); a goal's
# copy of a task's record operation names the goal (``record_goal_fact``).
OPERATION_IDS: dict[tuple[str, str], str] = {
    ("GET", "/project/compile-settings"): "compile_settings",
    ("PUT", "/project/compile-settings"): "set_compile_settings",
    ("GET", "/project/approval-settings"): "approval_settings",
    ("PUT", "/project/approval-settings"): "set_approval_settings",
    ("GET", "/approvals"): "approvals",
    ("GET", "/approvals/{approval_id}"): "approval",
    ("POST", "/approvals/{approval_id}/decision"): "decide_approval",
    ("GET", "/project/retention"): "retention",
    ("PUT", "/project/retention"): "set_retention",
    ("GET", "/artifacts/{item_id}/content"): "artifact_content",
    ("GET", "/bundles/{digest}"): "bundle",
    ("GET", "/compiles/{request_id}"): "compile_request",
    ("GET", "/completions/{request_id}"): "completion",
    ("GET", "/contexts/{digest}"): "context",
    ("GET", "/contexts/{digest}/diff/{other}"): "context_diff",
    ("GET", "/contexts/{digest}/excluded"): "excluded",
    ("GET", "/contexts/{digest}/replay"): "replay_context_get",
    ("POST", "/contexts/{digest}/replay"): "replay_context",
    ("POST", "/contexts/{digest}/usage"): "report_usage",
    ("GET", "/escalations"): "escalations",
    ("GET", "/escalations/{escalation_id}"): "escalation",
    ("POST", "/escalations/{escalation_id}/resolve"): "resolve_escalation",
    ("GET", "/events"): "events",
    ("GET", "/events/stream"): "event_stream",
    ("POST", "/events/stream/tickets"): "create_stream_ticket",
    ("GET", "/facts/{fact_id}"): "fact",
    ("POST", "/facts/{fact_id}/retract"): "retract_fact",
    ("POST", "/facts/{fact_id}/supersede"): "supersede_fact",
    ("POST", "/facts/{fact_id}/verify"): "verify_fact",
    ("GET", "/goals"): "goals",
    ("POST", "/goals"): "create_goal",
    ("GET", "/goals/{goal_id}"): "goal",
    ("POST", "/goals/{goal_id}/fork"): "fork_goal",
    ("GET", "/goals/{goal_id}/tasks/{key}"): "goal_task",
    ("POST", "/goals/{scope_id}/artifacts"): "record_goal_artifact",
    ("POST", "/goals/{scope_id}/decisions"): "record_goal_decision",
    ("POST", "/goals/{scope_id}/facts"): "record_goal_fact",
    ("GET", "/goals/{scope_id}/grants"): "goal_grants",
    ("POST", "/goals/{scope_id}/grants"): "create_goal_grant",
    ("POST", "/goals/{scope_id}/progress"): "record_goal_progress",
    ("GET", "/goals/{scope_id}/tools"): "goal_tools",
    ("PUT", "/goals/{scope_id}/tools"): "set_goal_tools",
    ("GET", "/health"): "health",
    ("GET", "/items"): "items",
    ("GET", "/items/{item_id}"): "item",
    ("GET", "/models"): "models",
    ("GET", "/models/catalog"): "model_catalog",
    ("PUT", "/models/catalog"): "replace_model_catalog",
    ("PUT", "/models/{word}/overlay"): "set_model_overlay",
    ("DELETE", "/models/{word}/overlay"): "delete_model_overlay",
    ("GET", "/sources"): "sources",
    ("POST", "/sources"): "create_source",
    ("GET", "/tasks"): "tasks",
    ("POST", "/tasks/{scope_id}/artifacts"): "record_artifact",
    ("POST", "/tasks/{scope_id}/decisions"): "record_decision",
    ("POST", "/tasks/{scope_id}/facts"): "record_fact",
    ("POST", "/tasks/{scope_id}/failures"): "record_failure",
    ("GET", "/tasks/{scope_id}/grants"): "task_grants",
    ("POST", "/tasks/{scope_id}/grants"): "create_task_grant",
    ("POST", "/tasks/{scope_id}/progress"): "record_progress",
    ("POST", "/tasks/{scope_id}/tool-calls"): "record_tool_call",
    ("GET", "/tasks/{scope_id}/tools"): "task_tools",
    ("PUT", "/tasks/{scope_id}/tools"): "set_task_tools",
    ("GET", "/tasks/{task_id}"): "task",
    ("POST", "/tasks/{task_id}/approvals"): "request_approval",
    ("POST", "/tasks/{task_id}/block"): "block",
    ("GET", "/tasks/{task_id}/bundle"): "task_bundle",
    ("POST", "/tasks/{task_id}/cancel"): "cancel",
    ("POST", "/tasks/{task_id}/compile"): "compile",
    ("POST", "/tasks/{task_id}/complete"): "complete",
    ("GET", "/tasks/{task_id}/completions"): "completions",
    ("GET", "/tasks/{task_id}/contexts"): "contexts",
    ("GET", "/tasks/{task_id}/contract"): "contract",
    ("PUT", "/tasks/{task_id}/contract"): "register_contract",
    ("POST", "/tasks/{task_id}/fail"): "fail",
    ("POST", "/tasks/{task_id}/fork"): "fork_task",
    ("POST", "/tasks/{task_id}/plan-gate/override"): "override_plan_gate",
    ("GET", "/tasks/{task_id}/questions"): "questions",
    ("PUT", "/tasks/{task_id}/questions"): "set_questions",
    ("POST", "/tasks/{task_id}/resolve"): "resolve",
    ("GET", "/resolves/{request_id}"): "resolve_request",
    ("POST", "/tasks/{task_id}/start"): "start",
    ("POST", "/tasks/{task_id}/unblock"): "unblock",
    ("GET", "/tools"): "tools",
    ("POST", "/tools"): "create_tool",
    ("GET", "/tools/{name}"): "tool",
    ("PUT", "/tools/{name}"): "set_tool",
    ("DELETE", "/tools/{name}"): "delete_tool",
    ("GET", "/usage"): "usage",
    ("GET", "/webhooks"): "webhooks",
    ("POST", "/webhooks"): "create_webhook",
    ("GET", "/webhooks/{webhook_id}"): "webhook",
    ("DELETE", "/webhooks/{webhook_id}"): "delete_webhook",
    ("GET", "/webhooks/{webhook_id}/deliveries"): "webhook_deliveries",
}


class RoleAwareSchema(AutoSchema):
    def get_operation_id(self) -> str:
        """The operation's name in ``OPERATION_IDS``; an operation without one is a configuration error."""
        try:
            return OPERATION_IDS[(self.method, self.path.removeprefix(API_PREFIX))]
        except KeyError:
            raise ImproperlyConfigured(
                f"{self.method} {self.path} has no operationId: name it in OPERATION_IDS "
                "(nexum_web/api/schema.py)"
            ) from None

    def get_override_parameters(self) -> list[Any]:
        declared = query_serializer(self.view, self.method)
        reads = self.method in READ_METHODS and AgentTokenAuthentication in self.view.authentication_classes
        return [
            *super().get_override_parameters(),
            *([declared] if declared else []),
            *([MIN_POSITION_PARAMETER] if reads else []),
        ]

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        schema = super()._map_basic_serializer(serializer, direction)
        if isinstance(serializer, StrictInput) or (
            isinstance(serializer, type) and issubclass(serializer, StrictInput)
        ):
            schema["additionalProperties"] = False
            _member_constraints(serializer, schema)
            if schema.get("description") == get_doc(StrictInput):  # the base's, not the body's
                del schema["description"]
            # The rules across members go under allOf: beside typed members, a top-level anyOf would make
            # a generated client take the body as untyped (openapi-python-client does).
            rules = [{"not": {"required": list(pair)}} for pair in serializer.exclusive]
            if serializer.requires_one_of:
                rules.append({"anyOf": [_given(schema, name) for name in serializer.requires_one_of]})
            if rules:
                schema["allOf"] = rules
        return schema

    def _get_request_for_media_type(self, serializer: Any, direction: str = "request") -> Any:
        """A body that must give one of some members is a required body (drf-spectacular counts only
        required members)."""
        schema, required = super()._get_request_for_media_type(serializer, direction)
        instance = force_instance(serializer)
        return schema, required or bool(isinstance(instance, StrictInput) and instance.requires_one_of)

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return operation
        for status in sorted(self._error_statuses(operation)):
            operation["responses"].setdefault(
                str(status), {"content": {"application/json": {"schema": self._error_schema()}}}
            )
            operation["responses"][str(status)]["description"] = ERROR_MEANINGS[status]
        rule = operator_rule(self.view, self.method)
        if rule is None:
            return operation
        if rule.fields:
            members = ", ".join(f"`{name}`" for name in rule.fields)
            note = f"A body with {members} needs an operator token ({rule.action}); an agent token gets 403."
            operation["x-nexum-operator-fields"] = list(rule.fields)
        else:
            note = f"Needs an operator token ({rule.action}); an agent token gets 403 `forbidden`."
            operation["x-nexum-role"] = OPERATOR
        operation["description"] = "\n\n".join(filter(None, [operation.get("description"), note]))
        return operation

    def _error_schema(self) -> dict[str, Any]:
        return self.resolve_serializer(ERROR, "response").ref

    def _error_statuses(self, operation: dict[str, Any]) -> set[int]:
        if not any(operation.get("security", [])):
            return {400}  # unknown query parameters; no token, no project to look in
        statuses = {400, 401, 404, 503}  # 503: the database may be unreachable for any of them
        if operator_rule(self.view, self.method) is not None or self._takes_trust_class():
            statuses.add(403)
        if self.method in WRITES:
            statuses |= {409, 413}
        declared: dict[str, tuple[int, ...]] = getattr(self.view, "error_statuses", {})
        return statuses | set(declared.get(self.method, ()))

    def _takes_trust_class(self) -> bool:
        if (
            self.method not in WRITES
            or type(self).get_request_serializer is AutoSchema.get_request_serializer
        ):
            return False  # no body declared (extend_schema declares one by overriding the method)
        request = self.get_request_serializer()
        return request is not None and _has_trust_field(request)


def _member_constraints(serializer: Any, schema: dict[str, Any]) -> None:
    """What drf-spectacular leaves out, at any depth of lists and maps: a text member that may not be blank
    says which characters count (``NOT_BLANK``; its own pattern, if it has one, already says more), a map
    that may not be empty says so (``minProperties``)."""
    fields = (serializer() if isinstance(serializer, type) else serializer).fields
    for name, field in fields.items():
        _constrain(field, schema["properties"].get(name, {}))


def _constrain(field: Any, member: dict[str, Any]) -> None:
    if "$ref" in member:
        return  # a nested body: its own serializer's schema says it
    if blank_refused(field) and member.get("type") == "string" and "pattern" not in member:
        member["pattern"] = NOT_BLANK
    child = getattr(field, "child", None)
    if isinstance(field, serializers.ListField) and isinstance(member.get("items"), dict):
        _constrain(child, member["items"])
    elif isinstance(field, serializers.DictField):
        if not field.allow_empty:
            member["minProperties"] = 1
        if isinstance(member.get("additionalProperties"), dict):
            _constrain(child, member["additionalProperties"])


def _given(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """A body that gives ``name``, not null."""
    member = schema["properties"][name]
    if not member.get("nullable"):
        return {"required": [name]}
    return {"required": [name], "properties": {name: {"type": member["type"]}}}


def _has_trust_field(serializer: Any) -> bool:
    if isinstance(serializer, type):
        serializer = serializer()
    if isinstance(serializer, serializers.ListSerializer):
        serializer = serializer.child
    if not isinstance(serializer, serializers.Serializer):
        return False
    for field in serializer.fields.values():
        if isinstance(field, CallerTrustField):
            return True
        child = getattr(field, "child", None)
        if _has_trust_field(field) or (child is not None and _has_trust_field(child)):
            return True
    return False


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


class StreamTicketScheme(OpenApiAuthenticationExtension):
    """The event stream's other credential: a single-use stream ticket in the query (a browser's
    ``EventSource`` cannot send the bearer header)."""

    target_class = StreamTicketAuthentication
    name = "streamTicket"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "query",
            "name": TICKET_PARAMETER,
            "description": "a ticket from `POST /api/v1/events/stream/tickets`: one stream, once, within "
            "NEXUM_EVENT_STREAM_TICKET_S seconds",
        }
