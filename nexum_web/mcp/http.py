"""MCP over Streamable HTTP at ``/mcp``, inside the WSGI service.

Nexum is a WSGI application (gunicorn's threaded workers, runserver); the SDK's Streamable HTTP transport is
ASGI. Rather than run a second server, or bridge the whole ASGI app to WSGI with an adapter that keeps its own
event loop thread (``a2wsgi``: every Django call would then hop to a shared executor thread, outside the
request that carried it), ``/mcp`` is an ordinary Django view that hands its one request to the SDK's session
manager in **stateless, JSON-response** mode through ``asgiref``'s ``async_to_sync``:

- stateless: each POST carries one JSON-RPC message and is answered whole; no session lives between
  requests, so any worker thread or process can answer any request and nothing is held open (a GET for a
  server-to-client stream, or a DELETE of a session, is 405 with ``Allow: POST``);
- JSON response: the answer is one ``application/json`` body, not an SSE stream, so the request ends when the
  tool call does and never pins a gunicorn thread;
- ``async_to_sync`` runs the SDK's coroutine while this thread waits, and the handlers' Django work
  (``sync_to_async(thread_sensitive=True)``) comes back to run on this very thread, inside this request: its
  database connection, its request id in the logs and error bodies, its middleware (request ids, HTTPS
  redirect) all apply as to any API request.

A batch (an array of messages) is answered as JSON-RPC answers one, an array of answers, under the protocol
version that has batches (2025-03-26, also assumed without an ``MCP-Protocol-Version`` header); a later
version removed them, and such a batch is -32600 saying so. A message that is no JSON-RPC message is -32600
in words, not the SDK's dump of validation errors. ``/mcp/`` is the same endpoint.

Authentication is the API's: the bearer token is checked before the SDK sees the request (401 in the one error
shape, with ``WWW-Authenticate``), and every tool call is an API request made with it. An exception no handler
answered (the database unreachable while the token is checked) is a JSON-RPC error, mapped as the API maps it
(``answer_exception``: an outage is HTTP 503 with ``Retry-After`` and error ``data.code``
``database_unavailable``), never Django's HTML error page. The SDK's own Host and
Origin checks are off: Django's ``ALLOWED_HOSTS`` checks the host, and a browser on another origin cannot send
the bearer token.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from asgiref.sync import async_to_sync
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import RawPostDataException
from django.views.decorators.csrf import csrf_exempt
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import INVALID_REQUEST
from rest_framework import exceptions

from nexum_web.api.auth import AgentTokenAuthentication
from nexum_web.api.errors import answer_exception, answered_as, error_body
from nexum_web.mcp.calls import ApiAnswer, Caller
from nexum_web.mcp.server import calling_as, mcp_error, server

_NO_HOST_CHECK = TransportSecuritySettings(enable_dns_rebinding_protection=False)
# The protocol versions with JSON-RPC batches: 2025-03-26 added them, 2025-06-18 removed them.
BATCH_VERSIONS = ("2025-03-26",)


@csrf_exempt
def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    try:
        return _answer(request)
    except Exception as error:
        return _jsonrpc_error(request, answer_exception(error, request))


def _answer(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        message = "POST one JSON-RPC message; this stateless server holds no stream (GET) or session (DELETE)"
        response = JsonResponse(error_body("method_not_allowed", message), status=405)
        response["Allow"] = "POST"
        return response
    authentication = AgentTokenAuthentication()
    try:
        authenticated = authentication.authenticate(request)
    except exceptions.AuthenticationFailed as error:
        return _unauthorized(authentication, "authentication_failed", str(error.detail))
    if authenticated is None:
        return _unauthorized(authentication, "not_authenticated", "send Authorization: Bearer <token>")
    try:
        body = request.body
    except RequestDataTooBig:
        return JsonResponse(error_body("too_large", "the request body is too large"), status=413)
    caller = Caller(
        token=request.headers["Authorization"].split()[1], host=request.get_host(), identity=authenticated
    )
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
        message = None  # the SDK answers its parse error
    if isinstance(message, list):
        return _batch(caller, request, message)
    if message is not None and (reason := _malformed(message)) is not None:
        return _invalid_request(reason)
    status, headers, content = async_to_sync(_serve)(caller, _scope(request), body)
    response = HttpResponse(content, status=status)
    for name, value in headers:
        if name.lower() != "content-length":
            response[name] = value
    return response


def _malformed(message: Any) -> str | None:
    """Why ``message`` is no JSON-RPC 2.0 request, notification or response, in words (the SDK's own answer
    is a dump of its validation errors)."""
    if not isinstance(message, dict):
        return "a JSON-RPC message is an object"
    if message.get("jsonrpc") != "2.0":
        return 'a JSON-RPC message has "jsonrpc": "2.0"'
    if "method" not in message and "result" not in message and "error" not in message:
        return 'a JSON-RPC request has a "method" (and an "id"; a notification has none)'
    if "method" in message and not isinstance(message["method"], str):
        return 'a JSON-RPC request\'s "method" is a string'
    return None


def _invalid_request(reason: str, identifier: Any = None, status: int = 400) -> JsonResponse:
    return JsonResponse(_rpc_error(reason, identifier), status=status)


def _rpc_error(reason: str, identifier: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": identifier, "error": {"code": INVALID_REQUEST, "message": reason}}


def _batch(caller: Caller, request: HttpRequest, messages: list[Any]) -> HttpResponse:
    """A JSON-RPC batch: refused under the protocol versions that removed batches (2025-06-18 on), else each
    message answered in turn, the answers in one array (notifications have none: only notifications is 202).
    Without an ``MCP-Protocol-Version`` header a server assumes 2025-03-26, which has batches."""
    version = request.headers.get("MCP-Protocol-Version")
    if version is not None and version not in BATCH_VERSIONS:
        return _invalid_request(
            f"MCP {version} has no JSON-RPC batches (2025-06-18 removed them): send one message per POST"
        )
    if not messages:
        return _invalid_request("an empty batch: send at least one message")
    answers: list[Any] = []
    scope = _scope(request)
    for message in messages:
        reason = _malformed(message)
        if reason is not None:
            answers.append(_rpc_error(reason, message.get("id") if isinstance(message, dict) else None))
            continue
        _, _, content = async_to_sync(_serve)(caller, scope, json.dumps(message).encode())
        if content:
            answers.append(json.loads(content))
    if not answers:
        return HttpResponse(status=202)
    return JsonResponse(answers, status=200, safe=False)


def _jsonrpc_error(request: HttpRequest, answered: HttpResponse) -> HttpResponse:
    """The API's error answer as the JSON-RPC error of the request's message (its ``id``, when one message
    was sent and it can be read), with the API's status and headers (``Retry-After``, ``X-Request-ID``)."""
    error = mcp_error(ApiAnswer(answered.status_code, json.loads(answered.content)))
    body = {"jsonrpc": "2.0", "id": _message_id(request), "error": error.error.model_dump(exclude_none=True)}
    return answered_as(JsonResponse(body, status=answered.status_code), answered)


def _message_id(request: HttpRequest) -> str | int | None:
    try:
        message = json.loads(request.body)
    except (ValueError, RequestDataTooBig, RawPostDataException):
        return None
    identifier = message.get("id") if isinstance(message, dict) else None
    return identifier if isinstance(identifier, str | int) and not isinstance(identifier, bool) else None


def _unauthorized(authentication: AgentTokenAuthentication, code: str, message: str) -> JsonResponse:
    response = JsonResponse(error_body(code, message), status=401)
    response["WWW-Authenticate"] = authentication.authenticate_header(None)  # type: ignore[arg-type]
    return response


def _scope(request: HttpRequest) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "root_path": "",
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in request.headers.items()
        ],
        "server": (request.get_host(), int(request.get_port())),
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
    }


async def _serve(
    caller: Caller, scope: dict[str, Any], body: bytes
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One HTTP request through the SDK's stateless JSON transport: its status, headers and body."""
    status = 500
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []
    answered = anyio.Event()
    body_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            headers.extend(
                (name.decode("latin-1"), value.decode("latin-1")) for name, value in message["headers"]
            )
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                answered.set()

    manager = StreamableHTTPSessionManager(
        app=server, json_response=True, stateless=True, security_settings=_NO_HOST_CHECK
    )
    with calling_as(caller):
        async with manager.run():
            await manager.handle_request(scope, receive, send)
    return status, headers, b"".join(chunks)
