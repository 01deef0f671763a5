"""Typed errors: every error answer of the server, ``{"error": {"code", "message", "field", "details",
"request_id"}}``, is raised as a ``NexumError`` subclass chosen by its HTTP status, carrying those members."""

from __future__ import annotations

from typing import Any


class NexumError(Exception):
    """An error answer of the server (or, for ``ConnectionFailed``, no answer at all)."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        field: str | None = None,
        details: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.field = field
        self.details = details or {}
        self.request_id = request_id

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        request = f" [request {self.request_id}]" if self.request_id else ""
        return f"{self.code}: {self.message}{where}{request}"


class BadRequest(NexumError):
    """400: bad input (``unknown_field``, ``invalid`` …); ``field`` names the member at fault."""


class Unauthorized(NexumError):
    """401: no token, or a token the server does not know."""


class Forbidden(NexumError):
    """403: the token's role may not do this (an operator's write), or a trust claim above its ceiling."""


class NotFound(NexumError):
    """404: no such object in the token's project."""


class Conflict(NexumError):
    """409: an illegal transition, a stale ``expected_version``, an ``Idempotency-Key`` reused for another
    request, a completion already pending …"""


class TooLarge(NexumError):
    """413: a body or an artifact over the server's limit."""


class Refused(NexumError):
    """422: refused by policy (``untrusted_content``, ``source_not_allowed``, ``workspace_violation`` …)."""


class Unavailable(NexumError):
    """503 (or a 502/504 from a proxy): the server or what it depends on is down; retried before raised."""


class ServerError(NexumError):
    """500 or another status the server should never answer; ``request_id`` finds it in the server's log."""


class ConnectionFailed(NexumError):
    """No answer: the connection failed, was dropped or timed out, every attempt."""


class CompletionTimeout(NexumError):
    """``complete(wait=True)`` polled past its deadline and the gate had not decided yet; ``details`` hold the
    ``request_id`` to poll later."""


class ApprovalTimeout(NexumError):
    """``wait_for_approval`` polled past its deadline and no operator had decided yet; ``details`` hold the
    ``approval_id`` to poll later."""


ERRORS_BY_STATUS: dict[int, type[NexumError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    422: Refused,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def error_from_response(status: int, body: Any, fallback_request_id: str | None = None) -> NexumError:
    """The typed error for an error answer; a body not in the one error shape still gives a typed error."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"code": f"http_{status}", "message": f"HTTP {status}"}
    klass = ERRORS_BY_STATUS.get(status, ServerError)
    return klass(
        str(error.get("message") or f"HTTP {status}"),
        code=str(error.get("code") or f"http_{status}"),
        status=status,
        field=error.get("field"),
        details=error.get("details") if isinstance(error.get("details"), dict) else {},
        request_id=error.get("request_id") or fallback_request_id,
    )
