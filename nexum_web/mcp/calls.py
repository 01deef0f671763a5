"""Calling the REST API in process: one MCP tool call is one API request, answered by the same view.

A tool does not reimplement a view: it builds the request the view would get over HTTP (method, path, query,
JSON body, the caller's bearer token, an ``Idempotency-Key``) and runs the view resolved from the path. So the
token is authenticated by ``AgentTokenAuthentication``, the role rules are ``OperatorOnlyOperations`` with the
view's ``operator_only``, trust claims go through ``CallerTrustField``, bad input is refused by the view's
strict serializer, and the answer (or the error, in the one error shape) is what a REST client would get.
Middleware does not run: the MCP transport's own request went through it.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpResponseBase
from django.urls import Resolver404, resolve

from nexum_web.api.auth import ProjectAgent
from nexum_web.api.errors import error_body
from tasks_app.models import AgentToken


@dataclass(frozen=True)
class ApiAnswer:
    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return self.status < 400


@dataclass(frozen=True)
class Caller:
    """Who calls: the bearer token every request carries and the host name requests are addressed to.
    ``own_connections``: the caller runs outside any HTTP request (stdio), so nothing else closes a database
    connection gone stale between calls. ``identity``: what the token authenticated as, when the HTTP request
    carrying the calls has just checked it; the views then take it as their request's user instead of looking
    the token up again. Without it (stdio, a session that outlives any request) every call checks the token,
    so a revoked token stops working mid-session."""

    token: str
    host: str = ""
    own_connections: bool = False
    identity: tuple[ProjectAgent, AgentToken] | None = None

    def host_name(self) -> str:
        if self.host:
            return self.host
        return next((host for host in settings.ALLOWED_HOSTS if host and "*" not in host), "localhost")


def api_call(
    caller: Caller,
    method: str,
    path: str,
    *,
    query: dict[str, Any] | None = None,
    body: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> ApiAnswer:
    """Run the API view at ``path`` for ``caller`` and return its status and JSON body."""
    payload = b"" if body is None else json.dumps(body).encode()
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": urlencode({k: v for k, v in (query or {}).items() if v is not None}),
        "SERVER_NAME": caller.host_name(),
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": caller.host_name(),
        "HTTP_ACCEPT": "application/json",
        "HTTP_AUTHORIZATION": f"Bearer {caller.token}",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(payload),
        "CONTENT_LENGTH": str(len(payload)),
        "CONTENT_TYPE": "application/json",
    }
    if idempotency_key is not None:
        environ["HTTP_IDEMPOTENCY_KEY"] = idempotency_key
    request = WSGIRequest(environ)
    if caller.identity is not None:  # DRF's Request takes these as its authentication (ForcedAuthentication)
        request._force_auth_user, request._force_auth_token = caller.identity  # type: ignore[attr-defined]
    try:
        match = resolve(path)
    except Resolver404:
        return ApiAnswer(404, error_body("not_found", f"no such endpoint: {path}"))
    request.resolver_match = match
    response: HttpResponseBase = match.func(request, *match.args, **match.kwargs)
    render = getattr(response, "render", None)
    if callable(render):
        render()
    content = getattr(response, "content", b"")
    return ApiAnswer(response.status_code, json.loads(content) if content else None)
