"""The time a resolution write acts at: the caller's ``now`` (timezone-aware, else refused) or the current
time."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from nexum.core.errors import ValidationFailed


def aware_now(now: datetime | None) -> datetime:
    value = now or timezone.now()
    if value.tzinfo is None:
        raise ValidationFailed("now must be timezone-aware", field="now")
    return value
