"""The API's HTTP edge: CORS for the configured origins, the method check, made before authentication, JSON
for an exception no view answered, and gzip for the answers.

DRF authenticates a request before it looks for the view's handler, so a method no API view has (``TRACE``,
``POST`` on a read-only endpoint) would be answered 401 to a caller without a token. The method is a property
of the URL, not of the caller: it is checked first, and answered 405 in the one error shape with ``Allow``.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import patch_vary_headers
from rest_framework.views import APIView

from nexum_web.api.errors import answer_exception, error_body


def allowed_methods(view_class: type[APIView]) -> list[str]:
    """The methods a view answers: its handlers, and HEAD wherever GET is (as Django's View does)."""
    names = {name for name in view_class.http_method_names if hasattr(view_class, name)}
    if "get" in names:
        names.add("head")
    return sorted(name.upper() for name in names)


class MethodCheckMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view_func: Any, view_args: Any, view_kwargs: Any
    ) -> HttpResponse | None:
        view_class = getattr(view_func, "view_class", None)
        if not (isinstance(view_class, type) and issubclass(view_class, APIView)):
            return None
        allowed = allowed_methods(view_class)
        if request.method in allowed:
            return None
        response = JsonResponse(
            error_body("method_not_allowed", f'method "{request.method}" is not allowed here'), status=405
        )
        response["Allow"] = ", ".join(allowed)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """Under /api/, an exception that escaped a view (a DRF view answers its own; one raised while its
        answer renders does not) is answered in the error shape, debug or not: a database outage 503, else
        500. Elsewhere Django's own handling applies."""
        if not request.path.startswith("/api/"):
            return None
        return answer_exception(exception, request)


class ApiCorsMiddleware:
    """CORS for ``/api/``, for the origins in ``NEXUM_CORS_ORIGINS`` only (exact ``scheme://host[:port]``).

    A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from an allowed origin is answered here,
    204, before authentication: a browser sends no credentials with it. Every answer to an allowed origin
    names it in ``Access-Control-Allow-Origin`` and exposes the headers a client reads. A request from any
    other origin gets no CORS header at all (its preflight goes on to the API, which answers it as any
    unauthenticated request), so the browser keeps the answer from the page. Credentials are bearer tokens
    and stream tickets, never cookies: no ``Access-Control-Allow-Credentials``.
    """

    ALLOW_METHODS = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
    ALLOW_HEADERS = (
        "Authorization, Content-Type, Idempotency-Key, If-Match, Last-Event-ID, Nexum-Min-Position, "
        "X-Request-ID"
    )
    EXPOSE_HEADERS = (
        "ETag, Location, Nexum-Position, Nexum-Read-From, Retry-After, Server-Timing, X-Request-ID"
    )
    MAX_AGE_S = 600

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        origin = request.headers.get("Origin")
        allowed = origin is not None and origin in settings.NEXUM_CORS_ORIGINS
        if allowed and request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            response = HttpResponse(status=204)
            response["Access-Control-Allow-Methods"] = self.ALLOW_METHODS
            response["Access-Control-Allow-Headers"] = self.ALLOW_HEADERS
            response["Access-Control-Max-Age"] = str(self.MAX_AGE_S)
        else:
            response = self.get_response(request)
        patch_vary_headers(response, ("Origin",))
        if allowed:
            response["Access-Control-Allow-Origin"] = origin
            response["Access-Control-Expose-Headers"] = self.EXPOSE_HEADERS
        return response


_ACCEPTS_GZIP = re.compile(r"\bgzip\b")


class ApiGZipMiddleware:
    """gzip for the API's answers when the caller accepts it (httpx, curl ``--compressed`` and browsers do).

    A compile answer is mostly its prompt block (24,000 tokens are ~65 KiB of text for a mid-size model). At
    level 1 an 84 KiB answer becomes 32 KiB in about 1 ms; Django's ``GZipMiddleware`` (level 6) makes it 29
    KiB in about 7 ms, more than the rest of the answer's writing. Only ``/api/`` is compressed: its answers
    carry no cookie-bound secret (callers authenticate with a bearer header and the API sets no CSRF token),
    so the BREACH attack that makes compressing the admin's and the UI's pages unwise has nothing to recover
    here. A streamed answer (the event stream) is left as it is: each event must reach the reader when it is
    written, not when a compressor flushes.
    """

    LEVEL = 1
    SMALLEST = 1024  # bytes; below this the header and the round trip outweigh what compression saves

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            not request.path.startswith("/api/")
            or response.streaming
            or response.has_header("Content-Encoding")
            or len(response.content) < self.SMALLEST
        ):
            return response
        patch_vary_headers(response, ("Accept-Encoding",))
        if not _ACCEPTS_GZIP.search(request.META.get("HTTP_ACCEPT_ENCODING", "")):
            return response
        compressed = gzip.compress(response.content, compresslevel=self.LEVEL, mtime=0)
        if len(compressed) >= len(response.content):
            return response
        response.content = compressed
        response["Content-Length"] = str(len(compressed))
        response["Content-Encoding"] = "gzip"
        etag = response.get("ETag")
        if etag and etag.startswith('"'):
            response["ETag"] = "W/" + etag  # the bytes changed: RFC 9110 8.8.1
        return response
