"""The MCP tools and resources: each one an API operation, described by the API's own OpenAPI schema.

A tool is a row of ``TOOLS``: its name, what it tells the model, and the API operation it calls (method and
path; the record tools have a second path for a goal). Its input schema is built from that operation in the
OpenAPI schema (path parameters, query parameters, the request body's members, and ``idempotency_key`` for a
POST), so the arguments a tool takes are exactly what the endpoint accepts, and the endpoint's strict
serializer validates them. Operator tools are marked: an agent token calling one is refused by the API's
role check, as over HTTP.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import quote

from django.urls import resolve
from drf_spectacular.generators import SchemaGenerator

from nexum_web.api.errors import error_body
from nexum_web.api.idempotency import KEY_MAX
from nexum_web.mcp.calls import ApiAnswer, Caller, api_call

_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_BUDGET_REASON = re.compile(r"needed \d+ tokens, \d+ left")

IDEMPOTENCY_ARGUMENT = {
    "type": "string",
    "minLength": 1,
    "maxLength": KEY_MAX,
    "description": "makes the call safe to retry: the same key again writes nothing and returns the first "
    "answer (the API's Idempotency-Key header)",
}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    method: str
    path: str
    goal_path: str | None = None
    operator: bool = False
    shape: Callable[[Any], Any] | None = None

    def call(self, caller: Caller, arguments: Mapping[str, Any]) -> ApiAnswer:
        """Run the tool's operation, ``arguments`` split into path, query or body, and idempotency key."""
        values = dict(arguments)
        key = values.pop("idempotency_key", None)
        if key is not None and not isinstance(key, str):
            return _invalid("idempotency_key", "idempotency_key must be a string")
        path = self.path
        if self.goal_path is not None and "goal_id" in values:
            if "task_id" in values:
                return _invalid("task_id", "give task_id or goal_id, not both")
            path = self.goal_path
        for name in _PLACEHOLDER.findall(path):
            value = values.pop(name, None)
            if not isinstance(value, str) or not value:
                what = "task_id or goal_id" if self.goal_path is not None else name
                return _invalid(name, f"{what} is required (a string)")
            path = path.replace(f"{{{name}}}", quote(value, safe=""))
        if self.method == "GET":
            query = {}
            for name, value in values.items():
                if isinstance(value, dict | list) or value is None:
                    return _invalid(name, f"{name} must be a string, a number or a boolean")
                query[name] = str(value).lower() if isinstance(value, bool) else value
            answer = api_call(caller, self.method, path, query=query)
        else:
            answer = api_call(caller, self.method, path, body=values, idempotency_key=key)
        if answer.ok and self.shape is not None:
            return ApiAnswer(answer.status, self.shape(answer.body))
        return answer


def _invalid(field: str, message: str) -> ApiAnswer:
    return ApiAnswer(400, error_body("invalid", message, field))


def compile_summary(body: dict[str, Any]) -> dict[str, Any]:
    """What a model call needs from a compile: the prompt block, the tools and the budget, with the excluded
    items counted per kind and reason instead of listed (the whole context is the resource
    ``nexum://contexts/{digest}``). A queued compile's answer is passed on as it is."""
    context = body.get("context") if isinstance(body, dict) else None
    if not isinstance(context, dict):
        return body
    exclusions = context.get("exclusions") or {}
    summary: dict[str, dict[str, int]] = {}
    for run in exclusions.get("runs", []):  # a run without a reason: each needed more tokens than were left
        reason = run["reason"]
        reason = "over budget" if reason is None or _BUDGET_REASON.fullmatch(reason) else reason
        per_kind = summary.setdefault(run["kind"], {})
        per_kind[reason] = per_kind.get(reason, 0) + run["count"]
    kept = (
        "digest",
        "model",
        "position",
        "budget",
        "prompt_block",
        "tools",
        "section_tokens",
        "total_tokens",
    )
    return {
        "request_id": body.get("request_id"),
        **{name: context.get(name) for name in kept},
        "included": len(context.get("included", [])),
        "truncated": context.get("truncated", []),
        "excluded": {"count": exclusions.get("count", 0), "by_kind_and_reason": summary},
        "resource": f"nexum://contexts/{context.get('digest')}",
    }


_AS_AGENT = "Recorded as you; its trust class is at most your token's ceiling (agent_reported for an agent)."

TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in [
        ToolSpec(
            "record_fact",
            f"Record a fact on a task (task_id) or shared by its goal (goal_id). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/facts",
            goal_path="/api/v1/goals/{goal_id}/facts",
        ),
        ToolSpec(
            "record_decision",
            f"Record a decision and its rationale on a task (task_id) or its goal (goal_id). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/decisions",
            goal_path="/api/v1/goals/{goal_id}/decisions",
        ),
        ToolSpec(
            "record_failure",
            f"Record what failed on a task (its attempt by default). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/failures",
        ),
        ToolSpec(
            "record_progress",
            f"Record a progress note on a task (task_id) or its goal (goal_id). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/progress",
            goal_path="/api/v1/goals/{goal_id}/progress",
        ),
        ToolSpec(
            "record_tool_call",
            f"Record a tool call made for a task (its arguments are kept as a digest). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/tool-calls",
        ),
        ToolSpec(
            "record_artifact",
            "Record an artifact (uri, summary, optional content as content_text or content_base64, stored "
            f"by sha256) on a task (task_id) or its goal (goal_id). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/artifacts",
            goal_path="/api/v1/goals/{goal_id}/artifacts",
        ),
        ToolSpec(
            "retract_fact",
            "Retract a current fact (fact_id) with a reason; it stays in the history. Only a fact at or "
            "below your token's ceiling: an agent cannot retract what an operator recorded (403 naming "
            "trust_class).",
            "POST",
            "/api/v1/facts/{fact_id}/retract",
        ),
        ToolSpec(
            "supersede_fact",
            "Replace a current fact (fact_id) by a new one in the same scope; returns the new fact. Only a "
            "fact at or below your token's ceiling: an agent cannot supersede what an operator recorded (403 "
            f"naming trust_class). {_AS_AGENT}",
            "POST",
            "/api/v1/facts/{fact_id}/supersede",
        ),
        ToolSpec(
            "compile_context",
            "Compile the task's context for one model call under the model word's budget: the prompt block, "
            "the tools to expose, the budget and tokens per section; excluded items are counted per kind and "
            "reason (the full list is the resource nexum://contexts/{digest}). Facts not relevant enough to "
            "the step are left out (below the relevance floor); focus (what you are working on now) ranks "
            "them.",
            "POST",
            "/api/v1/tasks/{task_id}/compile",
            shape=compile_summary,
        ),
        ToolSpec(
            "get_compile",
            "A queued compile (compile_context with async: true): queued, done with its context, or failed.",
            "GET",
            "/api/v1/compiles/{request_id}",
        ),
        ToolSpec(
            "resolve_context",
            "Resolve the task's context from the sources its grants allow: the bundle (items with origin, "
            "trust class, staleness, conflicts), whether it is complete, why it stopped, escalations opened.",
            "POST",
            "/api/v1/tasks/{task_id}/resolve",
        ),
        ToolSpec(
            "start_task",
            "Start a pending task whose dependencies are completed, or retry a failed one (attempt + 1).",
            "POST",
            "/api/v1/tasks/{task_id}/start",
        ),
        ToolSpec(
            "request_completion",
            "Ask the verification gate to complete a running task. The contract's checks decide; your answer "
            "is recorded beside them and never decides. outcome: completed, failed, blocked, skipped, or "
            "pending (poll with get_completion and the completion's id).",
            "POST",
            "/api/v1/tasks/{task_id}/complete",
        ),
        ToolSpec(
            "get_completion",
            "A completion request: its status, outcome, reason, failing checks and each check run's output.",
            "GET",
            "/api/v1/completions/{request_id}",
        ),
        ToolSpec(
            "list_tasks",
            "The project's tasks (goals excluded), filtered by goal and state, paginated.",
            "GET",
            "/api/v1/tasks",
        ),
        ToolSpec(
            "get_task",
            "A task or goal: state, version, attempt, dependencies and its transitions.",
            "GET",
            "/api/v1/tasks/{task_id}",
        ),
        ToolSpec(
            "set_contract",
            "Register or replace a task's verification contract. An agent token is refused: the executing "
            "agent never sets its own bar.",
            "PUT",
            "/api/v1/tasks/{task_id}/contract",
            operator=True,
        ),
    ]
}


@dataclass(frozen=True)
class ResourceSpec:
    uri_template: str
    name: str
    description: str
    path: str

    def match(self, uri: str) -> dict[str, str] | None:
        """The template's one trailing placeholder's value in ``uri``, if ``uri`` is one of these."""
        prefix, placeholder = self.uri_template[:-1].split("{")
        value = uri.removeprefix(prefix)
        if value == uri or not value or "/" in value:
            return None
        return {placeholder: value}

    def read(self, caller: Caller, values: Mapping[str, str]) -> ApiAnswer:
        path = self.path
        for name, value in values.items():
            path = path.replace(f"{{{name}}}", quote(value, safe=""))
        return api_call(caller, "GET", path)


RESOURCES = [
    ResourceSpec(
        "nexum://tasks/{task_id}",
        "task",
        "A task: state, version, attempt, dependencies, transitions.",
        "/api/v1/tasks/{task_id}",
    ),
    ResourceSpec(
        "nexum://contexts/{digest}",
        "compiled context",
        "A stored compiled context: prompt block, tools, included items, exclusions per reason, budget.",
        "/api/v1/contexts/{digest}",
    ),
    ResourceSpec(
        "nexum://bundles/{digest}",
        "bundle",
        "A resolved context bundle: items with origin and trust, denials, conflicts, stop reason.",
        "/api/v1/bundles/{digest}",
    ),
]


# --- input schemas from the OpenAPI schema --------------------------------------------------------------


@cache
def openapi() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)


def _schema_path(path: str) -> str:
    """The OpenAPI path of the route serving ``path`` (placeholders named as its URL pattern names them)."""
    sample = _PLACEHOLDER.sub("x", path)
    route = resolve(sample).route
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


def _json_schema(node: Any, components: Mapping[str, Any]) -> Any:
    """An OpenAPI 3.0 schema as plain JSON Schema: references inlined, ``nullable`` as a null type, no
    ``discriminator`` (``oneOf`` says the same)."""
    if isinstance(node, list):
        return [_json_schema(item, components) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = _json_schema(components[node["$ref"].rsplit("/", 1)[1]], components)
        return {**target, **{k: _json_schema(v, components) for k, v in node.items() if k != "$ref"}}
    openapi_only = ("nullable", "readOnly", "discriminator")  # a discriminator's mapping names components
    schema = {k: _json_schema(v, components) for k, v in node.items() if k not in openapi_only}
    if node.get("nullable"):
        if isinstance(schema.get("type"), str):
            schema["type"] = [schema["type"], "null"]
        else:
            schema = {"anyOf": [schema, {"type": "null"}]}
    return schema


@cache
def input_schema(name: str) -> dict[str, Any]:
    spec = TOOLS[name]
    document = openapi()
    components = document["components"]["schemas"]
    operation = document["paths"][_schema_path(spec.path)][spec.method.lower()]
    properties: dict[str, Any] = {}
    required: list[str] = []
    for placeholder in _PLACEHOLDER.findall(spec.path):
        properties[placeholder] = {
            "type": "string",
            "description": f"the {placeholder.removesuffix('_id')}'s id",
        }
        if spec.goal_path is None:
            required.append(placeholder)
    if spec.goal_path is not None:
        properties["goal_id"] = {"type": "string", "description": "the goal's id (instead of task_id)"}
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "query":
            properties[parameter["name"]] = {
                **_json_schema(parameter.get("schema", {}), components),
                **({"description": parameter["description"]} if "description" in parameter else {}),
            }
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body is not None:
        body_schema = _json_schema(body, components)
        properties.update(body_schema.get("properties", {}))
        required.extend(body_schema.get("required", []))
    if spec.method == "POST":
        properties["idempotency_key"] = IDEMPOTENCY_ARGUMENT
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def answer_text(body: Any) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
