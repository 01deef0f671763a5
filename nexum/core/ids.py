"""UUID parsing shared by projections and selectors (framework-free)."""

from __future__ import annotations

import uuid


def as_uuid(value: object) -> uuid.UUID:
    """``value`` as a ``uuid.UUID``; a malformed value raises ``ValueError``."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def uuid_or_none(value: object) -> uuid.UUID | None:
    """``value`` as a ``uuid.UUID``, or None when it is not one (a caller's id that cannot match any row)."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        return None
