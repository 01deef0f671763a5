"""The tools' input and output schemas, built from their operations in the API's own OpenAPI schema (path
parameters, query parameters, the request body's members, and ``idempotency_key`` for a POST), so the
arguments a tool takes are exactly what the endpoint accepts. A tool's output schema is its operation's
success answers, with a refusal's error object beside them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from django.urls import resolve
from drf_spectacular.generators import SchemaGenerator

from nexum_web.api.idempotency import KEY_MAX
from nexum_web.mcp.json_schema import as_json_schema
from nexum_web.mcp.specs import PLACEHOLDER
from nexum_web.mcp.tools import TOOLS

IDEMPOTENCY_ARGUMENT = {
    "type": "string",
    "minLength": 1,
    "maxLength": KEY_MAX,
    "description": "makes the call safe to retry: the same key again writes nothing and returns the first "
    "answer (the API's Idempotency-Key header)",
}


@cache
def openapi() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)


def _schema_path(path: str) -> str:
    """The OpenAPI path of the route serving ``path`` (placeholders named as its URL pattern names them)."""
    sample = PLACEHOLDER.sub("x", path)
    route = resolve(sample).route
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


@cache
def input_schema(name: str) -> dict[str, Any]:
    spec = TOOLS[name]
    document = openapi()
    components = document["components"]["schemas"]
    operation = document["paths"][_schema_path(spec.path)][spec.method.lower()]
    properties: dict[str, Any] = {}
    required: list[str] = []
    for placeholder in PLACEHOLDER.findall(spec.path):
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
                **as_json_schema(parameter.get("schema", {}), components),
                **({"description": parameter["description"]} if "description" in parameter else {}),
            }
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body is not None:
        body_schema = as_json_schema(body, components)
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
        answer = as_json_schema(schema, components)
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
            "error": as_json_schema(components["ErrorDetail"], components),
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
        },
        "required": ["error", "status"],
        "additionalProperties": False,
    }
