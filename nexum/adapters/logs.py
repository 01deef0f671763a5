"""Request ids and structured logs.

Every HTTP request gets an id. A sane incoming ``X-Request-ID`` (1–128 letters, digits and ``._:-``, what
proxies and load balancers send) is kept so one id follows a call through them; anything else is replaced by a
fresh one rather than refused (a request is never failed for its tracing header). The id is returned in the
``X-Request-ID`` response header, in every error body (``error.request_id``, see ``nexum_web.api.errors``)
and on every log record written while the request is handled.

Logs are JSON lines on stderr (``LOGGING`` in settings), with or without ``NEXUM_DEBUG``: Django logs every
unhandled exception on ``django.request`` with its traceback, and Django's own default configuration would
write those records only while debug is on. The body of a 500 stays the JSON error shape without the
traceback; the log has it, under the same request id.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

from django.http import HttpRequest, HttpResponse

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_request_id: ContextVar[str | None] = ContextVar("nexum_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the HTTP request being handled in this context, or None outside one."""
    return _request_id.get()


@contextmanager
def request_id_kept_or_new() -> Iterator[str]:
    """A request id for work that may run outside an HTTP request (an MCP call over stdio): the current
    request's id when there is one, else a fresh id for the duration of the block."""
    current = _request_id.get()
    if current is not None:
        yield current
        return
    token = _request_id.set(uuid.uuid4().hex)
    try:
        yield _request_id.get() or ""
    finally:
        _request_id.reset(token)


def request_id_from(header: str | None) -> str:
    """The caller's id when it is sane, else a new one."""
    if header is not None and _SANE_REQUEST_ID.fullmatch(header):
        return header
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """First in ``MIDDLEWARE``: everything after it, and every log record it writes, sees the id."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        token = _request_id.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            _request_id.reset(token)
        response[REQUEST_ID_HEADER] = request_id
        return response


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (None outside a request) to every record a handler writes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message, request_id, the HTTP status Django
    attaches to its request records, and the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        status_code = getattr(record, "status_code", None)
        if status_code is not None:
            entry["status_code"] = status_code
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)
