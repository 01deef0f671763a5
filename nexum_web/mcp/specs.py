"""What a tool and a resource are: ``ToolSpec`` (a tool's name, what it tells the model, the API operation it
calls, and the call itself: its arguments split into path, query or body) and ``ResourceSpec`` (a URI
template read by one GET). The tools themselves are rows of ``tools.TOOLS``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from nexum_web.api.errors import error_body
from nexum_web.mcp.calls import ApiAnswer, Caller, api_call

# A placeholder of an operation's path, ``{task_id}``.
PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Reshaped:
    """An argument whose API form is a free-form map, which strict hosts (the OpenAI Agents SDK's strict
    schemas) cannot take: the tool takes it in ``schema``'s form and ``to_api`` turns it into the map, raising
    ``ValueError`` with a message for the model when it cannot."""

    schema: dict[str, Any]
    to_api: Callable[[Any], Any]


@dataclass(frozen=True)
class McpTool:
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
        for name in PLACEHOLDER.findall(path):
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
