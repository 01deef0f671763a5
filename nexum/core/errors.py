"""One error hierarchy for everything a user can cause.

Each error carries a stable ``code``, a human ``message`` and, where one input is at fault, the ``field``.
The API maps these to HTTP statuses in one place (nexum_web/api/errors.py); the core never knows about HTTP.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """Base of every error a caller can cause. Subclasses set ``code`` and ``kind``."""

    code = "domain_error"
    # invalid | not_found | conflict | too_large | refused | forbidden | too_many | unavailable
    kind = "invalid"

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        details: dict[str, Any] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details or {}
        if code is not None:
            self.code = code


class ValidationFailed(DomainError):
    """Input is malformed: a missing member, a wrong type, a value out of range."""

    code = "invalid"
    kind = "invalid"


class NotFound(DomainError):
    code = "not_found"
    kind = "not_found"


class Conflict(DomainError):
    """The request is well-formed but conflicts with current state (HTTP 409)."""

    code = "conflict"
    kind = "conflict"


class ConcurrencyError(Conflict):
    """A stream's version is not the one the caller expected; nothing was written."""

    code = "concurrency_conflict"


def require_expected_version(
    current: int, expected: int | None, what: str, *, unit: str = "version", field: str = "expected_version"
) -> int:
    """``current``, or ``ConcurrencyError`` when the caller expected another ``unit`` of ``what``."""
    if expected is not None and expected != current:
        raise ConcurrencyError(
            f"{what} is at {unit} {current}, not the expected {expected}",
            field=field,
            details={f"current_{unit}": current, f"expected_{unit}": expected},
        )
    return current


class IllegalTransition(Conflict):
    code = "illegal_transition"


class TooLarge(DomainError):
    code = "too_large"
    kind = "too_large"


class PolicyRefused(DomainError):
    """Well-formed and consistent, but refused by policy (HTTP 422)."""

    code = "refused_by_policy"
    kind = "refused"


class Forbidden(DomainError):
    code = "forbidden"
    kind = "forbidden"


class TooMany(DomainError):
    """The caller already holds as many of something as it may (HTTP 429); it may try again once one ends,
    ``details["retry_after_s"]`` says when."""

    code = "too_many"
    kind = "too_many"


class Unavailable(DomainError):
    """A service the request needs is down; nothing was written, the same request can be sent again later."""

    code = "unavailable"
    kind = "unavailable"
