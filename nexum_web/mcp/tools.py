"""The MCP tools and resources: each one an API operation, described by the API's own OpenAPI schema.

A tool is a row of ``TOOLS``: its name, what it tells the model, and the API operation it calls (method and
path; the record tools have a second path for a goal). Its input schema is built from that operation in the
OpenAPI schema (path parameters, query parameters, the request body's members, and ``idempotency_key`` for a
POST), so the arguments a tool takes are exactly what the endpoint accepts, and the endpoint's strict
serializer validates them; where the API takes a free-form map a strict host cannot describe, the tool takes
a list (``Reshaped``) or leaves the member to another tool (``omitted``). Its output schema is built from the
operation's success answers, with a refusal's error object beside them. Operator tools are marked: an agent
token calling one is refused by the API's role check, as over HTTP.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
class Reshaped:
    """An argument whose API form is a free-form map, which strict hosts (the OpenAI Agents SDK's strict
    schemas) cannot take: the tool takes it in ``schema``'s form and ``to_api`` turns it into the map, raising
    ``ValueError`` with a message for the model when it cannot."""

    schema: dict[str, Any]
    to_api: Callable[[Any], Any]


@dataclass(frozen=True)
class ToolSpec:
    """One tool. Its annotations say what a host may assume: ``read_only`` for a GET; ``destructive`` when a
    call takes back or replaces what is current (a retracted or superseded fact, a replaced contract), never
    for an append; ``idempotent`` when calling again with the same arguments has no further effect (the
    second start of a task is a 409, the same completion request names the same stream)."""

    name: str
    description: str
    method: str
    path: str
    goal_path: str | None = None
    operator: bool = False
    shape: Callable[[Any], Any] | None = None
    # The JSON schema of ``shape``'s answer, built from the OpenAPI components.
    shape_schema: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    # Body members the tool does not take, each with what to use instead: the operation's free-form maps,
    # which strict hosts cannot describe, have a tool of their own.
    omitted: Mapping[str, str] = field(default_factory=dict)
    reshaped: Mapping[str, Reshaped] = field(default_factory=dict)
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False

    @property
    def read_only(self) -> bool:
        return self.method == "GET"

    def call(self, caller: Caller, arguments: Mapping[str, Any]) -> ApiAnswer:
        """Run the tool's operation, ``arguments`` split into path, query or body, and idempotency key."""
        values = dict(arguments)
        for name, instead in self.omitted.items():
            if name in values:
                return _invalid(name, f"{self.name} does not take {name}: {instead}")
        for name, reshaped in self.reshaped.items():
            if name in values:
                try:
                    values[name] = reshaped.to_api(values[name])
                except ValueError as error:
                    return _invalid(name, str(error))
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


def _invalid(member: str, message: str) -> ApiAnswer:
    return ApiAnswer(400, error_body("invalid", message, member))


# The compiled context's members a compile summary passes on as they are.
SUMMARY_KEPT = (
    "digest",
    "model",
    "position",
    "budget",
    "prompt_block",
    "tools",
    "section_tokens",
    "total_tokens",
)


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
    kept = SUMMARY_KEPT
    return {
        "request_id": body.get("request_id"),
        **{name: context.get(name) for name in kept},
        "included": len(context.get("included", [])),
        "truncated": context.get("truncated", []),
        "excluded": {"count": exclusions.get("count", 0), "by_kind_and_reason": summary},
        "resource": f"nexum://contexts/{context.get('digest')}",
    }


def compile_summary_schema(components: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON schema of ``compile_summary``'s answer: the kept members as the compiled context declares
    them."""
    context = _json_schema(components["CompiledContext"], components)
    members = context["properties"]
    kept = SUMMARY_KEPT
    count = {"type": "integer", "minimum": 0}
    return {
        "type": "object",
        "properties": {
            "request_id": {"type": "string"},
            **{name: members[name] for name in kept},
            "included": {**count, "description": "how many items the context holds"},
            "truncated": members["truncated"],
            "excluded": {
                "type": "object",
                "properties": {
                    "count": count,
                    "by_kind_and_reason": {
                        "type": "object",
                        "description": "excluded items counted per kind, then per reason",
                        "additionalProperties": {"type": "object", "additionalProperties": count},
                    },
                },
                "required": ["count", "by_kind_and_reason"],
            },
            "resource": {"type": "string", "description": "the whole context: read this resource"},
        },
        "required": ["request_id", *kept, "included", "truncated", "excluded", "resource"],
    }


SCOPE = {"type": "string", "minLength": 1, "maxLength": 500}
SOURCES_ARGUMENT = {
    "type": "array",
    "description": "only these sources, each with the scopes to read (none: all the scopes it declares); "
    "default: every source of the project, all its scopes",
    "items": {
        "type": "object",
        "properties": {
            "source": {"type": "string", "minLength": 1, "description": "a source's name"},
            "scopes": {"type": "array", "items": SCOPE, "description": "none: all its declared scopes"},
        },
        "required": ["source"],
        "additionalProperties": False,
    },
}


def sources_map(sources: Any) -> dict[str, list[str]]:
    """``[{source, scopes?}]`` as the API's ``{source: [scopes]}``; a source named twice is refused."""
    if not isinstance(sources, list):
        raise ValueError("sources must be a list of {source, scopes}")
    by_name: dict[str, list[str]] = {}
    for entry in sources:
        name = entry.get("source") if isinstance(entry, dict) else None
        scopes = entry.get("scopes", []) if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or set(entry) - {"source", "scopes"}:
            raise ValueError("each of sources is {source: a name, scopes?: a list of scopes}")
        if name in by_name:
            raise ValueError(f"source {name!r} is named twice in sources")
        by_name[name] = scopes
    return by_name


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
            destructive=True,
            idempotent=True,
        ),
        ToolSpec(
            "supersede_fact",
            "Replace a current fact (fact_id) by a new one in the same scope; returns the new fact. Only a "
            "fact at or below your token's ceiling: an agent cannot supersede what an operator recorded (403 "
            f"naming trust_class). {_AS_AGENT}",
            "POST",
            "/api/v1/facts/{fact_id}/supersede",
            destructive=True,
            idempotent=True,
        ),
        ToolSpec(
            "verify_fact",
            "Mark a current fact verified (an optional note says how you checked it); a superseded or "
            "retracted fact is refused.",
            "POST",
            "/api/v1/facts/{fact_id}/verify",
        ),
        ToolSpec(
            "get_fact",
            "A fact with its history: recorded, verified, superseded or retracted, by whom and when.",
            "GET",
            "/api/v1/facts/{fact_id}",
        ),
        ToolSpec(
            "list_items",
            "World-state items (facts, decisions, failures, artifacts, progress notes, tool calls) of the "
            "project, a goal or a task, filtered by kind; current: true leaves out superseded and retracted "
            "facts. Paginated: pass next_cursor back as cursor.",
            "GET",
            "/api/v1/items",
        ),
        ToolSpec(
            "create_goal",
            "Create a goal with its plan: an objective and its tasks (key, objective, depends_on by key, "
            "risk, inputs, constraints, success_criteria). Returns the goal with its tasks' ids. Contracts "
            "are an operator's: an operator registers each with set_contract.",
            "POST",
            "/api/v1/goals",
            omitted={
                "contracts": "an operator registers each task's contract with set_contract",
                "contract_origin": "an operator registers each task's contract with set_contract",
            },
        ),
        ToolSpec(
            "get_goal",
            "A goal with its tasks in plan order: state, version, dependencies.",
            "GET",
            "/api/v1/goals/{goal_id}",
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
            shape_schema=compile_summary_schema,
        ),
        ToolSpec(
            "report_usage",
            "After the model call made with a compiled context (digest), report what the provider counted: "
            "its usage's prompt_tokens and completion_tokens, the provider and model, the cost if known. The "
            "answer's drift is (prompt_tokens - Nexum's count) / Nexum's count; operators see it per model "
            "card and raise the card's safety margin when it drifts.",
            "POST",
            "/api/v1/contexts/{digest}/usage",
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
            reshaped={"sources": Reshaped(SOURCES_ARGUMENT, sources_map)},
            open_world=True,
        ),
        ToolSpec(
            "start_task",
            "Start a pending task whose dependencies are completed, or retry a failed one (attempt + 1).",
            "POST",
            "/api/v1/tasks/{task_id}/start",
            idempotent=True,
        ),
        ToolSpec(
            "fail_task",
            "Give up the running attempt of a task (running → failed, with a reason); start_task retries it "
            "(attempt + 1). expected_version: the version you acted on (a moved-on task is refused, 409).",
            "POST",
            "/api/v1/tasks/{task_id}/fail",
            idempotent=True,
        ),
        ToolSpec(
            "block_task",
            "Stop a running task that needs a human or an operator (running → blocked, with a reason); an "
            "operator unblocks it. Open escalations are listed by list_escalations.",
            "POST",
            "/api/v1/tasks/{task_id}/block",
            idempotent=True,
        ),
        ToolSpec(
            "request_completion",
            "Ask the verification gate to complete a running task. The contract's checks decide; your answer "
            "is recorded beside them and never decides. outcome: completed, failed, blocked, skipped, or "
            "pending (poll with get_completion and the completion's id).",
            "POST",
            "/api/v1/tasks/{task_id}/complete",
            idempotent=True,
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
            "list_escalations",
            "Escalations of the project or a task (task), open or resolved (state): context gaps and "
            "conflicts a human closes. Paginated: pass next_cursor back as cursor.",
            "GET",
            "/api/v1/escalations",
        ),
        ToolSpec(
            "request_approval",
            "Ask an operator to approve an action before you take it: one of your own (action, e.g. "
            "deploy, with arguments_digest: the sha256 of its arguments) or, after a denial, the task's "
            "start or complete again. Returns the approval (pending); read the answer with get_approval.",
            "POST",
            "/api/v1/tasks/{task_id}/approvals",
        ),
        ToolSpec(
            "get_approval",
            "An approval: pending, granted or denied, with the operator's reason. start_task and "
            "request_completion of a task that needs one are refused (approval_required, naming it) until "
            "it is granted.",
            "GET",
            "/api/v1/approvals/{approval_id}",
        ),
        ToolSpec(
            "list_approvals",
            "Approvals of the project or a task (task), by state (pending, granted, denied). Paginated: "
            "pass next_cursor back as cursor.",
            "GET",
            "/api/v1/approvals",
        ),
        ToolSpec(
            "decide_approval",
            "Grant or deny a pending approval with a reason. An agent token is refused: an agent never "
            "approves its own step.",
            "POST",
            "/api/v1/approvals/{approval_id}/decision",
            operator=True,
        ),
        ToolSpec(
            "set_contract",
            "Register or replace a task's verification contract. An agent token is refused: the executing "
            "agent never sets its own bar.",
            "PUT",
            "/api/v1/tasks/{task_id}/contract",
            operator=True,
            destructive=True,
        ),
        ToolSpec(
            "fork",
            "Fork a task (task_id) or a goal with its plan (goal_id) from a past log position "
            "(at_position: a compile's or an event's position): a new goal whose world is the source's as "
            "it stood then, every task pending; the source is untouched. Retrying with the same "
            "idempotency_key returns the first fork. An agent token is refused.",
            "POST",
            "/api/v1/tasks/{task_id}/fork",
            goal_path="/api/v1/goals/{goal_id}/fork",
            operator=True,
            omitted={"key": "pass idempotency_key"},
            idempotent=True,
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


# Keywords that describe a value without constraining it: kept beside a nullable schema's anyOf.
_ANNOTATIONS = ("description", "title", "default", "examples", "deprecated")
# Keywords that constrain which values a schema takes; a schema with none takes any value.
_CONSTRAINTS = ("type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "properties", "items")
# Any JSON value, said explicitly (what the OpenAPI schema leaves as ``{}``: a JSON field of a model), each
# branch of one type as the Inspector recommends for portability.
ANY_JSON: dict[str, Any] = {
    "anyOf": [{"type": kind} for kind in ("object", "array", "string", "number", "boolean", "null")]
}


def _json_schema(node: Any, components: Mapping[str, Any]) -> Any:
    """An OpenAPI 3.0 schema as plain JSON Schema hosts take: references inlined, an ``allOf`` of one merged,
    ``nullable`` as an ``anyOf`` with a null branch (the Inspector's recommendation: one type per branch), a
    schema that constrains nothing as ``ANY_JSON``, no ``discriminator`` (``oneOf`` says the same)."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = _json_schema(components[node["$ref"].rsplit("/", 1)[1]], components)
        return {**target, **{k: _json_schema(v, components) for k, v in node.items() if k != "$ref"}}
    schema: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("nullable", "readOnly", "discriminator"):  # a discriminator's mapping names components
            continue
        if key == "properties":
            schema[key] = {name: _json_schema(member, components) for name, member in value.items()}
        elif key in ("items", "not") or (key == "additionalProperties" and isinstance(value, dict)):
            schema[key] = _json_schema(value, components)
        elif key in ("anyOf", "oneOf", "allOf"):
            schema[key] = [_json_schema(branch, components) for branch in value]
        else:
            schema[key] = value
    only = schema.get("allOf")
    if isinstance(only, list) and len(only) == 1 and isinstance(only[0], dict):
        # drf-spectacular wraps a described enum or reference in an allOf of one: strict hosts take no allOf.
        del schema["allOf"]
        schema = {**only[0], **schema}
    if not any(key in schema for key in _CONSTRAINTS):
        return {**ANY_JSON, **schema}
    if node.get("nullable"):
        annotations = {key: schema.pop(key) for key in _ANNOTATIONS if key in schema}
        if "enum" in schema:
            schema["enum"] = [value for value in schema["enum"] if value is not None]
        schema = {"anyOf": [schema, {"type": "null"}], **annotations}
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
        members = body_schema.get("properties", {})
        properties.update({name: value for name, value in members.items() if name not in spec.omitted})
        properties.update({name: reshaped.schema for name, reshaped in spec.reshaped.items()})
        required.extend(name for name in body_schema.get("required", []) if name not in spec.omitted)
    if spec.method == "POST":
        properties["idempotency_key"] = IDEMPOTENCY_ARGUMENT
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


@cache
def output_schema(name: str) -> dict[str, Any]:
    """The tool's results: any of its operation's success answers as the OpenAPI schema declares them (a
    shaped answer: its own schema) or, for a refused call (``isError``), the API's error object with the HTTP
    status. Clients check results against it (the SDK's client the answers, the Inspector's every result)."""
    spec = TOOLS[name]
    document = openapi()
    components = document["components"]["schemas"]
    operation = document["paths"][_schema_path(spec.path)][spec.method.lower()]
    answers: list[dict[str, Any]] = []
    for status, response in sorted(operation["responses"].items()):
        schema = response.get("content", {}).get("application/json", {}).get("schema")
        if not status.startswith("2") or schema is None:
            continue
        answer = _json_schema(schema, components)
        if spec.shape_schema is not None and status == "200":
            answer = spec.shape_schema(components)
        if answer not in answers:
            answers.append(answer)
    return {"type": "object", "anyOf": [*answers, refusal_schema(components)]}


def refusal_schema(components: Mapping[str, Any]) -> dict[str, Any]:
    """The structured content of a refused call: the API's error object and the HTTP status."""
    return {
        "type": "object",
        "description": "a refused call (isError): the API's error and the HTTP status",
        "properties": {
            "error": _json_schema(components["ErrorDetail"], components),
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
        },
        "required": ["error", "status"],
        "additionalProperties": False,
    }


def answer_text(body: Any) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
