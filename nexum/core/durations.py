"""Durations as people read them: ``91204813`` seconds is "3 years", a TTL of ``2592000`` is "30 days".

Pure and deterministic (no clock): the caller passes the seconds, measured against a time it recorded, so a
text built from it is as reproducible as its input. Units are exact ones (a year is 365 days); months and
weeks are left out so that a configured TTL reads as it was set ("30 days", not "1 month").
"""

from __future__ import annotations

import math

_UNITS = (  # largest first: (seconds, singular, plural)
    (365 * 86400, "year", "years"),
    (86400, "day", "days"),
    (3600, "hour", "hours"),
    (60, "minute", "minutes"),
    (1, "second", "seconds"),
)


def human_duration(seconds: float) -> str:
    """``seconds`` in the largest unit it reaches, rounded half up ("1 day", "2 days", "3 years"); a value
    that rounds up to the next unit is said in it (86399 seconds is "1 day", not "24 hours")."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise ValueError(f"a duration needs a finite number of seconds, not {seconds!r}")
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative ({seconds!r} seconds)")
    index = next((i for i, (size, _, _) in enumerate(_UNITS) if seconds >= size), len(_UNITS) - 1)
    size, singular, plural = _UNITS[index]
    amount = math.floor(seconds / size + 0.5)
    if index > 0 and amount * size >= _UNITS[index - 1][0]:
        amount, singular, plural = 1, _UNITS[index - 1][1], _UNITS[index - 1][2]
    return f"{amount} {singular if amount == 1 else plural}"


def human_age(seconds: float) -> str:
    """How long ago something was observed, ``seconds`` before the reference time: "3 years ago"."""
    return f"{human_duration(seconds)} ago"
