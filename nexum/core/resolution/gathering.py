"""The resolver's first phase: the results of the planned calls become the candidate items, each with its
effective trust (R3, R4, R4a), its staleness (R6) and its labels. A result the plan did not allow becomes a
denial; a planned source that failed or did not answer, a source error (R11).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from nexum.core.durations import human_age, human_duration
from nexum.core.injection import looks_like_instruction
from nexum.core.resolution.model import (
    DENY_NOT_PLANNED,
    LABEL_AGENT_WRITABLE,
    LABEL_CONFLICT,
    LABEL_STALE,
    LABEL_SUSPECTED_INSTRUCTION,
    LABEL_TRUST_DOWNGRADED,
    Denial,
    Freshness,
    ItemKey,
    RetrievalPlan,
    RetrievedItem,
    SourceError,
    SourceResult,
    SourceSpec,
    item_key,
    require_aware,
)
from nexum.core.roles import AGENT, OPERATOR, content_ceiling
from nexum.core.trust import TrustClass, effective_trust


def staleness_of(
    item: RetrievedItem, source_freshness: Freshness, current_revision: str | None, now: datetime
) -> tuple[bool, str | None]:
    """Whether ``item`` is stale, and why: older than the source's TTL, or the source's revision has moved
    since the item was read (an unknown current revision never makes an item stale). The age is measured
    against ``now``, the resolve's own time, never the clock (the bundle stores the reason, so a compile that
    renders it reads no clock either), and said in human units ("observed 3 years ago (TTL 30 days)")."""
    require_aware(now, "now")
    reasons = []
    if source_freshness.ttl_seconds is not None:
        age = now - item.observed_at
        if age > timedelta(seconds=source_freshness.ttl_seconds):
            ttl = human_duration(source_freshness.ttl_seconds)
            reasons.append(f"observed {human_age(age.total_seconds())} (TTL {ttl})")
    if (
        source_freshness.track_revision
        and current_revision is not None
        and item.revision is not None
        and item.revision != current_revision
    ):
        reasons.append(f"source revision moved from {item.revision} to {current_revision}")
    return (True, "; ".join(reasons)) if reasons else (False, None)


def _prepare(
    item: RetrievedItem, spec: SourceSpec, result: SourceResult, key: bytes | str | None, now: datetime
) -> RetrievedItem:
    """The item as the bundle carries it: effective trust, staleness and labels applied. Trust follows who
    can write (R4a): a source the agent can write, as registered or as read, yields at most ``agent_reported``
    whatever the item claims."""
    trust, downgrade = effective_trust(
        item.trust_class,
        spec.highest_trust,
        item.signature,
        key,
        text=item.text,
        subject=item.subject,
        locator=item.locator,
    )
    agent_writable = AGENT in (spec.writable_by, result.writable_by)
    ceiling = content_ceiling(AGENT if agent_writable else OPERATOR)
    if trust > ceiling:
        trust = ceiling
        why = f"the executing agent can write source {spec.name!r}: at most {ceiling.name}"
        downgrade = why if downgrade is None else f"{downgrade}; {why}"
    stale, stale_reason = staleness_of(item, spec.freshness, result.current_revision, now)
    labels = set(item.labels) - {LABEL_STALE, LABEL_TRUST_DOWNGRADED, LABEL_CONFLICT, LABEL_AGENT_WRITABLE}
    if agent_writable:
        labels.add(LABEL_AGENT_WRITABLE)
    if trust < TrustClass.repository_authored and looks_like_instruction(item.text):
        labels.add(LABEL_SUSPECTED_INSTRUCTION)
    if stale:
        labels.add(LABEL_STALE)
    if downgrade:
        labels.add(LABEL_TRUST_DOWNGRADED)
    return replace(
        item,
        source=spec.name,
        trust_class=trust,
        downgrade_reason=downgrade,
        stale=stale,
        stale_reason=stale_reason,
        labels=tuple(labels),
        conflict_group=None,
    )


@dataclass(frozen=True)
class Gathered:
    candidates: dict[ItemKey, RetrievedItem]
    denials: list[Denial]
    errors: list[SourceError]


def gather(
    plan: RetrievalPlan,
    specs: Mapping[str, SourceSpec],
    results: Sequence[SourceResult],
    signing_key: bytes | str | None,
    now: datetime,
) -> Gathered:
    """The items of the planned calls, prepared (``_prepare``); a result the plan did not allow is a denial
    (its items discarded), a failed or missing one a source error."""
    denials = list(plan.denials)
    errors: list[SourceError] = []
    candidates: dict[ItemKey, RetrievedItem] = {}
    reported: set[str] = set()
    for result in sorted(results, key=lambda r: (r.source, r.error or "")):
        if plan.scopes_for(result.source) is None:
            if result.items:
                denials.append(
                    Denial(
                        result.source,
                        (),
                        DENY_NOT_PLANNED,
                        "result from a call the grant did not allow; discarded",
                    )
                )
            continue
        reported.add(result.source)
        if result.error is not None:
            errors.append(SourceError(result.source, result.error_kind or "error", result.error))
            continue
        spec = specs[result.source]
        for item in result.items:
            prepared = _prepare(item, spec, result, signing_key, now)
            candidates[item_key(prepared)] = prepared
    for call in plan.calls:
        if call.source not in reported:
            errors.append(SourceError(call.source, "unreachable", "the source reported no result"))
    return Gathered(candidates, denials, errors)
