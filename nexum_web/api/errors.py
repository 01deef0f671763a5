"""One error format for the whole API (SPEC I3):
``{"error": {"code", "message", "field", "details", "request_id"}}``.

Every error a caller can cause maps here to a stable code and an HTTP status; nothing a caller sends yields
a 500. Domain errors carry their own code; DRF and Django errors are given the codes below. A database that
cannot be reached is 503 ``database_unavailable`` (``database_outage`` says which errors are an outage), and
every 503 and 429 carries ``Retry-After`` (the error's ``details.retry_after_s``, else ``RETRY_AFTER_S``):
nothing was written, the same request may be sent again then. Any other exception is a 500 in the same
shape, logged as Django logs it, never Django's debug page. ``request_id`` is the id of the request
(``nexum.adapters.logs``), the one the logs carry.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
from django.conf import settings
from django.core import signals
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.log import log_response
from rest_framework import exceptions, status
from rest_framework.response import Response

from nexum.adapters.logs import current_request_id
from nexum.core.errors import DomainError, TooLarge, Unavailable
from nexum.eventstore import replica
from nexum.eventstore.models import AppendOnlyError
from nexum_web.api.strict import UNKNOWN_FIELD, UNKNOWN_PARAMETER

STATUS_BY_KIND = {
    "invalid": status.HTTP_400_BAD_REQUEST,
    "forbidden": status.HTTP_403_FORBIDDEN,
    "not_found": status.HTTP_404_NOT_FOUND,
    "conflict": status.HTTP_409_CONFLICT,
    "too_large": status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    "refused": status.HTTP_422_UNPROCESSABLE_ENTITY,
    "too_many": status.HTTP_429_TOO_MANY_REQUESTS,
    "unavailable": status.HTTP_503_SERVICE_UNAVAILABLE,
}
# The kinds a caller may send again later: their answers say when (``Retry-After``).
RETRY_LATER_KINDS = ("too_many", "unavailable")

# The codes of DRF's own exceptions, by class: stable names, documented in the README.
DRF_CODES = {
    exceptions.ParseError: "malformed_request",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
}


def error_body(code: str, message: str, field: str | None = None, details: Any = None) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "field": field,
            "details": details or {},
            "request_id": current_request_id(),
        }
    }


SERVER_ERROR_MESSAGE = "internal error; the operator has the details under this request_id"
# How long a caller waits before sending a request refused 503 again (a database restart takes seconds).
RETRY_AFTER_S = 2


class DatabaseUnavailable(Unavailable):
    code = "database_unavailable"


# PostgreSQL's SQLSTATEs of an outage: connection exceptions (class 08), insufficient resources (53: too many
# connections, disk full) and the server shutting down or starting up (57P01–57P03). A statement timeout or
# a deadlock (also psycopg OperationalErrors) is not an outage.
_POSTGRES_OUTAGE_CLASSES = ("08", "53")
_POSTGRES_OUTAGE_STATES = ("57P01", "57P02", "57P03")
# SQLite's errors of a file that cannot be used now: another writer holds the lock past the timeout, the file
# or its folder cannot be opened, the disk fails. "no such table" and the like are bugs, not outages.
_SQLITE_OUTAGES = ("database is locked", "unable to open database file", "disk i/o error", "disk is full")


def database_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached or used now, as opposed to a bug in a query: on
    connect or mid-request, from Django's wrapper (whose cause is the driver's error) or the driver itself."""
    cause = exc.__cause__ if isinstance(exc, OperationalError | InterfaceError) and exc.__cause__ else exc
    if isinstance(cause, InterfaceError | psycopg.InterfaceError):
        return True  # the connection is closed or unusable
    if isinstance(cause, psycopg.OperationalError):
        state = cause.sqlstate
        return state is None or state[:2] in _POSTGRES_OUTAGE_CLASSES or state in _POSTGRES_OUTAGE_STATES
    if isinstance(cause, sqlite3.OperationalError):
        return str(cause).lower().startswith(_SQLITE_OUTAGES)
    return False


def database_unavailable() -> DatabaseUnavailable:
    return DatabaseUnavailable(
        "the database cannot be reached; nothing was written: send the same request again later",
        details={"retry_after_s": RETRY_AFTER_S},
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    if isinstance(exc, RequestDataTooBig):
        exc = _body_too_large(context["request"])
    if replica.note_replica_failed(exc):
        response = _domain_error(database_unavailable())
        _log_outage(exc, context["request"], response, "Read on the replica failed, reading from the primary")
        return response
    if database_outage(exc):
        response = _domain_error(database_unavailable())
        _log_outage(exc, context["request"], response)
        return response
    if isinstance(exc, DomainError):
        return _domain_error(exc)
    if isinstance(exc, AppendOnlyError):
        return Response(error_body("append_only", str(exc)), status=status.HTTP_409_CONFLICT)
    if isinstance(exc, Http404):
        return Response(error_body("not_found", "not found"), status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, DjangoPermissionDenied):
        return Response(
            error_body("permission_denied", "permission denied"), status=status.HTTP_403_FORBIDDEN
        )
    if isinstance(exc, DjangoValidationError):
        return Response(error_body("invalid", "; ".join(exc.messages)), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, exceptions.ValidationError):
        field, message, code = _first_error(exc.detail)
        return Response(error_body(code, message, field, exc.detail), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, exceptions.APIException):
        code = next((name for klass, name in DRF_CODES.items() if isinstance(exc, klass)), "error")
        response = Response(error_body(code, str(exc.detail)), status=exc.status_code)
        if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
            response["Retry-After"] = str(int(exc.wait))
        return response
    return _server_error(exc, context["request"])


def _domain_error(exc: DomainError) -> Response:
    response = Response(
        error_body(exc.code, exc.message, exc.field, exc.details), status=STATUS_BY_KIND[exc.kind]
    )
    if exc.kind in RETRY_LATER_KINDS:
        response["Retry-After"] = str(exc.details.get("retry_after_s", RETRY_AFTER_S))
    return response


def _body_too_large(request: HttpRequest) -> TooLarge:
    """Django refused to read a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (by its Content-Length, unread)."""
    size = request.META.get("CONTENT_LENGTH")
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return TooLarge(
        f"the request body is {size} bytes; the limit is {limit} bytes",
        details={"size": int(size) if size and size.isdigit() else None, "max_bytes": limit},
    )


def _server_error(exc: Exception, request: Any) -> Response:
    """An exception no mapping knows: what Django does for an uncaught one (the ``got_request_exception``
    signal, the traceback logged on ``django.request``), answered in the one error shape."""
    django_request = getattr(request, "_request", request)
    signals.got_request_exception.send(sender=None, request=django_request)
    response = Response(error_body("server_error", SERVER_ERROR_MESSAGE), status=500)
    log_response(
        "%s: %s",
        response.reason_phrase,
        django_request.path,
        response=response,
        request=django_request,
        exception=exc,
    )
    return response


def _log_outage(exc: BaseException, request: Any, response: Any, what: str = "Database unavailable") -> None:
    """An outage is logged once per request on ``django.request``, as a warning naming its cause: the
    operator's to see, not a bug's traceback."""
    django_request = getattr(request, "_request", request)
    log_response(
        "%s: %s (%s)",
        what,
        django_request.path,
        str(exc).strip(),
        response=response,
        request=django_request,
        level="warning",
    )


def _first_error(detail: Any, prefix: str = "") -> tuple[str | None, str, str]:
    """The dotted path, message and code of the first leaf error in DRF's nested error detail. The code is
    ``invalid`` but for the codes the strict input bases give (``unknown_field``, ``unknown_parameter``)."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            if key == "non_field_errors":
                path = key
            elif isinstance(key, int) or str(key).isdigit():
                path = f"{prefix}[{key}]"
            else:
                path = f"{prefix}.{key}" if prefix else str(key)
            field, message, code = _first_error(value, path)
            return (None if field == "non_field_errors" else field), message, code
    if isinstance(detail, list):
        for index, value in enumerate(detail):
            if isinstance(value, dict | list):
                return _first_error(value, f"{prefix}[{index}]")
            return (prefix or None), str(value), _stable_code(value)
    return (prefix or None), str(detail), _stable_code(detail)


def _stable_code(detail: Any) -> str:
    code = getattr(detail, "code", None)
    return code if code in (UNKNOWN_FIELD, UNKNOWN_PARAMETER) else "invalid"


def json_not_found(request: HttpRequest) -> JsonResponse:
    """The view of every path under /api/ that no endpoint matches (nexum_web/urls.py), in debug as well."""
    return JsonResponse(error_body("not_found", f"no such endpoint: {request.path}"), status=404)


def answer_exception(exc: Exception, request: HttpRequest) -> HttpResponse:
    """An exception raised outside a DRF view (``/mcp``, a DRF answer failing to render), answered by the
    mapping above as a DRF view's would be, as JSON: Django's HTML error page never answers the API."""
    answered = exception_handler(exc, {"request": request})
    return answered_as(JsonResponse(answered.data, status=answered.status_code), answered)


def answered_as(response: HttpResponse, answered: HttpResponse) -> HttpResponse:
    """``response`` (the same error in another body) with ``answered``'s headers (``Retry-After``) but its
    own body's, and logged as ``answered`` was: exception_handler logged it once, with its cause, and
    Django's handler would log the copy again."""
    for name, value in answered.items():
        if name.lower() not in ("content-type", "content-length"):
            response[name] = value
    response._has_been_logged = getattr(answered, "_has_been_logged", False)  # type: ignore[attr-defined]
    return response


def json_server_error(request: HttpRequest) -> JsonResponse:
    """Django's 500 (debug off): the error shape without the traceback, which Django logged under the same
    request id (``django.request``, see ``nexum.adapters.logs``)."""
    return JsonResponse(error_body("server_error", SERVER_ERROR_MESSAGE), status=500)
