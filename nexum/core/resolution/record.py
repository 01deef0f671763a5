"""What one resolve of a task records (R2, R7, R8): its calls and denials, the bundle, and the escalations
it opens and closes, as events.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

from nexum.core.events import DomainEvent
from nexum.core.ids import RESOLUTION_IDS
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.escalations import evidence_of, gaps_of, plan_escalations
from nexum.core.resolution.model import Bundle, PlannedCall, SourceResult
from nexum.core.resolution.settlements import Settlement


def escalation_id_for(*, resolve_id: str, key: str) -> str:
    """The id of the escalation a resolve opens for the gap ``key`` (the same on a redelivery)."""
    return str(uuid.uuid5(RESOLUTION_IDS, f"escalation:{resolve_id}:{key}"))


def queued_resolve_id(*, project_id: str, request_id: str) -> str:
    """The id of the queued resolve a caller's request id names in its project (its row and its stream)."""
    return str(uuid.uuid5(RESOLUTION_IDS, f"{project_id}/resolve-request/{request_id}"))


def resolve_events(
    *,
    task_id: str,
    goal_id: str,
    resolve_id: str,
    query: str,
    calls: Sequence[PlannedCall],
    results: Sequence[SourceResult],
    bundle: Bundle,
    open_by_key: Mapping[str, str],
    resolved_keys: Iterable[str],
    settlements: Sequence[Settlement],
    narrowed: bool,
) -> list[DomainEvent]:
    """What one resolve of a task records, in order: each call made (or failed), each denial, the bundle with
    the escalations it leaves open, the gaps it opens, and the open ones it closes (``plan_escalations``
    given the task's escalations by key and the goal's settlements). Ids and digests only, never text."""
    events: list[DomainEvent] = []
    by_source = {result.source: result for result in results}
    for call in calls:
        result = by_source[call.source]
        events.append(
            resolution_events.RetrievalPerformed(
                resolve_id=resolve_id,
                task_id=task_id,
                goal_id=goal_id,
                source=call.source,
                scopes=tuple(call.scopes),
                query=query,
                outcome="failed" if result.error is not None else "retrieved",
                item_digests=tuple(item.digest for item in result.items),
                error_kind=result.error_kind,
                error=result.error,
            )
        )
    for denial in bundle.denials:
        events.append(
            resolution_events.RetrievalDenied(
                resolve_id=resolve_id,
                task_id=task_id,
                goal_id=goal_id,
                source=denial.source,
                scopes=denial.scopes,
                code=denial.code,
                reason=denial.reason,
                query=query,
            )
        )
    plan = plan_escalations(
        gaps_of(bundle),
        open_by_key=open_by_key,
        resolved_keys=resolved_keys,
        settlements=settlements,
        narrowed=narrowed,
    )
    opened = [(escalation_id_for(resolve_id=resolve_id, key=gap.key), gap) for gap in plan.to_open]
    events.append(
        resolution_events.BundleResolved(
            resolve_id=resolve_id,
            task_id=task_id,
            goal_id=goal_id,
            bundle_digest=bundle.digest,
            complete=bundle.complete,
            stop_reason=bundle.stop_reason,
            risk=bundle.risk,
            items=tuple(
                {
                    "digest": item.digest,
                    "source": item.source,
                    "locator": item.locator,
                    "trust_class": item.trust_class.name,
                    "stale": item.stale,
                    "conflict_group": item.conflict_group,
                    "labels": list(item.labels),
                }
                for item in bundle.items
            ),
            escalation_ids=tuple(sorted([*plan.still_open, *(ident for ident, _ in opened)])),
            left_out_count=len(bundle.left_out_by_budget),
            denial_count=len(bundle.denials),
            source_error_count=len(bundle.source_errors),
            tokens_used=bundle.tokens_used,
        )
    )
    for ident, gap in opened:
        events.append(
            resolution_events.EscalationOpened(
                escalation_id=ident,
                task_id=task_id,
                goal_id=goal_id,
                resolve_id=resolve_id,
                bundle_digest=bundle.digest,
                key=gap.key,
                kind=gap.kind,
                missing=gap.missing,
                why=gap.reason,
                subjects=gap.subjects,
                sources=gap.sources,
                conflict_group=gap.conflict_group,
                evidence=evidence_of(gap, bundle),
            )
        )
    for ident in plan.to_close:
        events.append(
            resolution_events.EscalationResolved(
                escalation_id=ident,
                task_id=task_id,
                resolution=resolution_events.RESOLVE_GAP_CLOSED,
                detail={"resolve_id": resolve_id, "bundle_digest": bundle.digest},
                reason="a later resolve no longer shows this gap",
            )
        )
    return events
