"""The API's HTTP edge: the method check, made before authentication, and gzip for its answers.

DRF authenticates a request before it looks for the view's handler, so a method no API view has (``TRACE``,
``POST`` on a read-only endpoint) would be answered 401 to a caller without a token. The method is a property
of the URL, not of the caller: it is checked first, and answered 405 in the one error shape with ``Allow``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.gzip import GZipMiddleware
from rest_framework.views import APIView

from nexum_web.api.errors import error_body


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


class ApiGZipMiddleware(GZipMiddleware):
    """gzip for the API's answers when the caller accepts it (httpx, curl ``--compressed`` and browsers do).

    A compile answer is mostly its prompt block (24,000 tokens are ~65 KiB of text for a mid-size model),
    which compresses about fourfold. Only ``/api/`` is compressed: its answers carry no cookie-bound secret
    (callers authenticate with a bearer header and the API sets no CSRF token), so the BREACH attack that
    makes compressing the admin's and the UI's pages unwise has nothing to recover here. An event stream is
    left as it is: each event must reach the reader when it is written, not when a compressor flushes.
    """

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if not request.path.startswith("/api/") or response.get("Content-Type", "").startswith(
            "text/event-stream"
        ):
            return response
        return super().process_response(request, response)
