"""The ``Idempotency-Key`` header, read one way by every API: absent means no key; present, it must be 1 to
200 characters and not blank, or the request is refused with 400 naming the header."""

from __future__ import annotations

import re

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request

from nexum.core.errors import ValidationFailed
from nexum.core.text import NOT_BLANK

HEADER = "Idempotency-Key"
KEY_MAX = 200

IDEMPOTENCY_HEADER = OpenApiParameter(
    HEADER,
    {"type": "string", "minLength": 1, "maxLength": KEY_MAX, "pattern": NOT_BLANK},
    OpenApiParameter.HEADER,
    required=False,
    description="Makes the POST safe to retry: a repeat with the same key writes nothing and returns the "
    "same result; the same key with a different request is a 409 `idempotency_key_reused`. "
    f"1–{KEY_MAX} characters.",
)


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not re.search(NOT_BLANK, key) or len(key) > KEY_MAX:
        raise ValidationFailed(f"the {HEADER} header is 1–{KEY_MAX} characters, not blank", field=HEADER)
    return key
