"""The MCP server: the SDK's low-level ``Server`` with Nexum's tools, resources and prompt, and its two
transports.

Handlers are asynchronous (the SDK's); the work is Django's and synchronous. Each handler runs its API call
with ``sync_to_async(thread_sensitive=True)``: under the HTTP transport, which enters the SDK through
``async_to_sync`` from the WSGI request's thread, that runs the call back on that same thread, inside the
request (its database connection, closed when the request ends; its request id). Under stdio the calls run
one at a time on one thread, and the command closes a stale database connection before each. A call made
outside an HTTP request (stdio, an in-process client) gets a request id of its own, so its error bodies and
log records carry one.

Who calls is the ``Caller`` of the connection: the HTTP view sets it from the request's bearer token, the
stdio command from ``--token``. Every tool call is an API request carrying that token
(``nexum_web.mcp.calls``).

Errors, as the MCP specification (2025-11-25) splits them. A tool the API refused (bad input 400, 401, 403,
404, 409, 413, 422, 429, and 503: a service such as the database or the broker is down, send again later) is a
tool-execution error: a ``tools/call`` *result* with ``isError: true``, whose text is the API's message naming
the field (what the model reads to correct its call) and whose ``structuredContent`` is the API's error
object (``code``, ``message``, ``field``, ``details``, ``request_id``) with the HTTP ``status``; the session
goes on. Protocol faults stay JSON-RPC errors: an unknown tool name is ``INVALID_PARAMS`` (-32602), a server
fault ``INTERNAL_ERROR`` (-32603). Reading a resource or getting a prompt has no error result: a refusal
is a JSON-RPC error carrying the same object as ``data`` (-32602 for bad input, ``NEXUM_REFUSED`` -32080 for
any other refusal). A refused call wrote nothing: the API refuses before its service writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from importlib.metadata import version
from typing import Any, TypeVar

import mcp_types as types
from asgiref.sync import sync_to_async
from django.db import close_old_connections
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from nexum.adapters.logs import request_id_kept_or_new
from nexum_web.mcp.calls import ApiAnswer, Caller
from nexum_web.mcp.prompts import TASK_CONTEXT, PromptRefused, task_context, task_resources
from nexum_web.mcp.schemas import input_schema, output_schema
from nexum_web.mcp.tools import RESOURCES, TOOLS

NEXUM_REFUSED = -32080

_caller: ContextVar[Caller | None] = ContextVar("nexum_mcp_caller", default=None)

_T = TypeVar("_T")


@contextmanager
def calling_as(caller: Caller) -> Iterator[None]:
    """Every MCP request handled in this context calls the API as ``caller``."""
    token = _caller.set(caller)
    try:
        yield
    finally:
        _caller.reset(token)


def _current_caller() -> Caller:
    caller = _caller.get()
    if caller is None:
        raise MCPError(types.INTERNAL_ERROR, "no caller: the transport did not authenticate this connection")
    return caller


async def _in_django(call: Callable[[], _T], caller: Caller) -> _T:
    def run() -> _T:
        if caller.own_connections:
            close_old_connections()
        with request_id_kept_or_new():
            return call()

    return await sync_to_async(run, thread_sensitive=True)()


def refusal_text(answer: ApiAnswer) -> str:
    """What the model reads of a refused call: the API's code and message, naming the field at fault."""
    error = _error_object(answer)
    field = error.get("field")
    text = f"{error.get('code', 'error')}: {error.get('message', '')}"
    return f"{text} (field: {field})" if field else text


def _error_object(answer: ApiAnswer) -> dict[str, Any]:
    error = answer.body.get("error") if isinstance(answer.body, dict) else None
    return error if isinstance(error, dict) else {}


def mcp_error(answer: ApiAnswer) -> MCPError:
    """The JSON-RPC error of a refused API call, where MCP has no error result (a resource read, the
    transport): its ``data`` is the API's error object with the HTTP status."""
    if answer.status == 400:
        rpc_code = types.INVALID_PARAMS
    elif answer.status >= 500 and answer.status != 503:
        rpc_code = types.INTERNAL_ERROR
    else:
        rpc_code = NEXUM_REFUSED
    return MCPError(rpc_code, refusal_text(answer), data={**_error_object(answer), "status": answer.status})


def answer_text(body: Any) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def tool_result(answer: ApiAnswer) -> types.CallToolResult:
    """A tool call's result: the API's answer, or its refusal as a tool-execution error the model can read
    and correct. A server fault (500) is no refusal to correct: it stays a JSON-RPC error."""
    if answer.ok:
        body = answer.body if isinstance(answer.body, dict) else {"result": answer.body}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=answer_text(body))], structured_content=body
        )
    if answer.status >= 500 and answer.status != 503:
        raise mcp_error(answer)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=refusal_text(answer))],
        structured_content={"error": _error_object(answer), "status": answer.status},
        is_error=True,
    )


async def _list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    schemas = await sync_to_async(
        lambda: {name: (input_schema(name), output_schema(name)) for name in TOOLS}, thread_sensitive=True
    )()
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name=spec.name,
                description=f"(operator) {spec.description}" if spec.operator else spec.description,
                input_schema=schemas[spec.name][0],
                output_schema=schemas[spec.name][1],
                annotations=types.ToolAnnotations(
                    read_only_hint=spec.read_only,
                    destructive_hint=None if spec.read_only else spec.destructive,
                    idempotent_hint=spec.read_only or spec.idempotent,
                    open_world_hint=spec.open_world,
                ),
            )
            for spec in TOOLS.values()
        ]
    )


async def _call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    spec = TOOLS.get(params.name)
    if spec is None:
        raise MCPError(types.INVALID_PARAMS, f"unknown tool: {params.name}", data={"field": "name"})
    caller = _current_caller()
    answer = await _in_django(lambda: spec.call(caller, params.arguments or {}), caller)
    return tool_result(answer)


async def _list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    caller = _current_caller()
    cursor = params.cursor if params is not None else None
    listed = await _in_django(partial(task_resources, caller, cursor), caller)
    if isinstance(listed, ApiAnswer):
        error = mcp_error(listed)
        if error.data.get("field") == "cursor":  # the specification's code for a cursor the list never gave
            raise MCPError(types.INVALID_PARAMS, error.message, data=error.data)
        raise error
    return listed


async def _list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=[TASK_CONTEXT])


async def _get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    caller = _current_caller()
    try:
        prompt = await _in_django(partial(task_context, caller, params.name, params.arguments), caller)
    except PromptRefused as refused:
        raise MCPError(types.INVALID_PARAMS, refused.message, data={"field": refused.field}) from None
    if isinstance(prompt, ApiAnswer):
        raise mcp_error(prompt)
    return prompt


async def _list_resource_templates(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(
        resource_templates=[
            types.ResourceTemplate(
                uri_template=spec.uri_template,
                name=spec.name,
                description=spec.description,
                mime_type="application/json",
            )
            for spec in RESOURCES
        ]
    )


async def _read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    uri = str(params.uri)
    for spec in RESOURCES:
        values = spec.match(uri)
        if values is not None:
            caller = _current_caller()
            answer = await _in_django(partial(spec.read, caller, values), caller)
            if not answer.ok:
                raise mcp_error(answer)
            return types.ReadResourceResult(
                contents=[
                    types.TextResourceContents(
                        uri=uri, text=answer_text(answer.body), mime_type="application/json"
                    )
                ]
            )
    raise MCPError(types.INVALID_PARAMS, f"no such resource: {uri}", data={"field": "uri"})


server: Server[Any] = Server(
    "nexum",
    version=version("nexum"),
    instructions="Nexum keeps your task's world state. Record what you learn (record_*), compile_context "
    "before each model call, and request_completion when done: deterministic checks decide.",
    on_list_tools=_list_tools,
    on_call_tool=_call_tool,
    on_list_resources=_list_resources,
    on_list_prompts=_list_prompts,
    on_get_prompt=_get_prompt,
    on_list_resource_templates=_list_resource_templates,
    on_read_resource=_read_resource,
)


async def serve_stdio(caller: Caller) -> None:
    """Serve ``server`` on this process's stdin and stdout, every call made as ``caller``."""
    with calling_as(caller):
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
