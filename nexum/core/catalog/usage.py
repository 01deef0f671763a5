"""The usage ledger (issue 28 item 3): what the provider reported for a model call made with a compiled
context, against what Nexum counted for it.

A compile's count is Nexum's tokenizer over the prompt block plus the tool schemas it charged (what the budget
measures: ``StoredContext.total_tokens``). The provider's ``prompt_tokens`` also counts what Nexum never saw
(its chat template, the caller's system prompt, its own tokenizer), so the two differ. Rules this module
settles:

* **Drift** of one call is ``(provider_prompt_tokens - nexum_tokens) / nexum_tokens``: 0.08 means the
  provider counted 8 % more than Nexum (the context would overflow a window it was budgeted to fill by that
  much), -0.05 that Nexum over-counted. A context of 0 tokens has no drift (``None``).
* **Percentiles** are nearest-rank over the drifts of a card's reports: the p-th percentile of n sorted
  values is the value at rank ``ceil(p / 100 * n)`` (1-based), so p50 of [0.01, 0.02, 0.10] is 0.02 and
  p95 is 0.10. No interpolation: every percentile is a drift some call had.
* A card **drifts** when its p95 drift is above the threshold (``NEXUM_USAGE_DRIFT_THRESHOLD``): only a
  provider counting *more* than Nexum overflows a window, so only positive drift is flagged.
* Token counts are 0 to ``MAX_TOKEN_COUNT``; ``provider`` and ``model`` are 1-200 characters, trimmed;
  ``cost`` is a number from 0 to 10**12 (the provider's currency, as the caller knows it), kept to 10 decimal
  places (rounded half to even: finer than any provider bills) as decimal text, so sums add no float error.

Each report is its own stream, ``usage-<usage_id>``: reports of one context never contend with each other,
and a retry with the same ``Idempotency-Key`` names the same stream and writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from nexum.core.catalog.changes import MAX_TOKEN_COUNT
from nexum.core.errors import ValidationFailed
from nexum.core.events import DomainEvent, event_type
from nexum.core.text import require_storable

NAME_MAX = 200
COST_MAX = Decimal("1e12")
COST_PLACES = 10


def usage_stream(usage_id: str) -> str:
    return f"usage-{usage_id}"


@event_type("ContextUsageReported")
@dataclass(frozen=True)
class ContextUsageReported(DomainEvent):
    """The provider's own counts for one call made with the context ``digest``. ``model_word`` is the word
    the context was compiled under, ``card_word`` the card it resolved to when reported (drift is kept per
    card); ``nexum_tokens`` Nexum's count of the context. ``cost`` is decimal text or ``None``."""

    usage_id: str
    digest: str
    task_id: str
    goal_id: str
    model_word: str
    card_word: str
    nexum_tokens: int
    provider: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost: str | None = None


def drift(provider_tokens: int, nexum_tokens: int) -> float | None:
    """``(provider - nexum) / nexum``; ``None`` when Nexum counted nothing."""
    if nexum_tokens <= 0:
        return None
    return (provider_tokens - nexum_tokens) / nexum_tokens


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of values sorted ascending (at least one)."""
    if not sorted_values:
        raise ValueError("a percentile of no values")
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True)
class DriftSummary:
    """A card's drift over its reports: how many, the p50 and p95 drift, and Nexum's and the provider's
    prompt tokens summed over them."""

    reports: int
    p50: float
    p95: float
    nexum_tokens: int
    provider_tokens: int

    def over(self, threshold: float) -> bool:
        return self.p95 > threshold


def summarize_drift(samples: Sequence[tuple[int, int]]) -> DriftSummary | None:
    """The summary of ``(nexum_tokens, provider_prompt_tokens)`` pairs; ``None`` when none has a drift."""
    drifts = sorted(d for nexum, provider in samples if (d := drift(provider, nexum)) is not None)
    if not drifts:
        return None
    return DriftSummary(
        reports=len(drifts),
        p50=percentile(drifts, 50),
        p95=percentile(drifts, 95),
        nexum_tokens=sum(nexum for nexum, _ in samples),
        provider_tokens=sum(provider for _, provider in samples),
    )


def validate_token_count(value: object, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOKEN_COUNT:
        raise ValidationFailed(
            f"{field} must be an integer from 0 to {MAX_TOKEN_COUNT}, got {value!r}", field=field
        )
    return value


def validate_name(value: object, field: str) -> str:
    """A provider's or model's name as the caller spells it: 1-200 characters once trimmed."""
    if not isinstance(value, str):
        raise ValidationFailed(f"{field} must be a string", field=field)
    require_storable(value, field)
    value = value.strip()
    if not value or len(value) > NAME_MAX:
        raise ValidationFailed(f"{field} is 1-{NAME_MAX} characters, not blank", field=field)
    return value


def validate_cost(value: object) -> str | None:
    """The cost as canonical decimal text (``0.0125``) to 10 places, or ``None``; negative, non-finite or
    over 10**12 is refused."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        raise ValidationFailed("cost must be a non-negative number", field="cost")
    try:
        cost = Decimal(str(value))
    except InvalidOperation:
        raise ValidationFailed(f"cost must be a non-negative number, got {value!r}", field="cost") from None
    if not cost.is_finite() or cost < 0 or cost > COST_MAX:
        raise ValidationFailed(f"cost must be a number from 0 to {COST_MAX:f}", field="cost")
    kept = cost.quantize(Decimal(10) ** -COST_PLACES, rounding=ROUND_HALF_EVEN).normalize()
    return f"{kept:f}"
