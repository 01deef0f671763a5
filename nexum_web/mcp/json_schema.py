"""OpenAPI 3.0 schemas as the plain JSON Schema MCP hosts take (references inlined, ``nullable`` as a null
branch, no ``allOf`` of one): what the tools' input and output schemas are built from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Keywords that describe a value without constraining it: kept beside a nullable schema's anyOf.
_ANNOTATIONS = ("description", "title", "default", "examples", "deprecated")
# Keywords that constrain which values a schema takes; a schema with none takes any value.
_CONSTRAINTS = ("type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "properties", "items")
# Any JSON value, said explicitly (what the OpenAPI schema leaves as ``{}``: a JSON field of a model), each
# branch of one type as the Inspector recommends for portability.
ANY_JSON: dict[str, Any] = {
    "anyOf": [{"type": kind} for kind in ("object", "array", "string", "number", "boolean", "null")]
}


def as_json_schema(node: Any, components: Mapping[str, Any]) -> Any:
    """An OpenAPI 3.0 schema as plain JSON Schema hosts take: references inlined, an ``allOf`` of one merged,
    ``nullable`` as an ``anyOf`` with a null branch (the Inspector's recommendation: one type per branch), a
    schema that constrains nothing as ``ANY_JSON``, no ``discriminator`` (``oneOf`` says the same)."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = as_json_schema(components[node["$ref"].rsplit("/", 1)[1]], components)
        return {**target, **{k: as_json_schema(v, components) for k, v in node.items() if k != "$ref"}}
    schema: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("nullable", "readOnly", "discriminator"):  # a discriminator's mapping names components
            continue
        if key == "properties":
            schema[key] = {name: as_json_schema(member, components) for name, member in value.items()}
        elif key in ("items", "not") or (key == "additionalProperties" and isinstance(value, dict)):
            schema[key] = as_json_schema(value, components)
        elif key in ("anyOf", "oneOf", "allOf"):
            schema[key] = [as_json_schema(branch, components) for branch in value]
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
