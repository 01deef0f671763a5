"""Text every database stores as given: no NUL (PostgreSQL refuses it) and encodable as UTF-8 (no unpaired
surrogate, which cannot even be written into a JSON response)."""

from __future__ import annotations

from typing import Final

from nexum.core.errors import ValidationFailed

NOT_BLANK = (
    "[^\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
)
"""A character Python's ``str.isspace()`` says is not whitespace, spelled out so that JSON Schema (ECMAScript)
regular expressions read it the same: the schema's pattern of a text member that may not be blank."""


def encodes(text: str) -> bool:
    """Whether ``text`` is encodable as UTF-8 (holds no unpaired surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_storable(text: str) -> bool:
    """Whether ``text`` holds neither NUL nor an unpaired surrogate."""
    return "\x00" not in text and encodes(text)


def require_storable(text: str, field: str) -> str:
    """``text`` itself; ``ValidationFailed`` naming ``field`` when it holds NUL or an unpaired surrogate."""
    if "\x00" in text:
        raise ValidationFailed(f"{field} must not contain NUL characters", field=field)
    if not encodes(text):
        raise ValidationFailed(f"{field} is not valid UTF-8 (unpaired surrogate)", field=field)
    return text


MAX_REASON_CHARS: Final = 2000


def validate_reason(reason: object, *, field: str = "reason") -> str:
    """A reason someone gives (a transition's, a grant's revocation, an override, a decision…): a string of at
    most ``MAX_REASON_CHARS`` characters that every database stores, stripped."""
    if not isinstance(reason, str):
        raise ValidationFailed("reason must be a string", field=field)
    if len(reason) > MAX_REASON_CHARS:
        raise ValidationFailed(f"reason has at most {MAX_REASON_CHARS} characters", field=field)
    return require_storable(reason, field).strip()
