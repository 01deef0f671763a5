"""What happens to a task's escalations (R7, R9): the gaps of a bundle, which escalations a resolve opens,
keeps or closes, whether the plan gate lets the task start, and which sides a human's pick rejects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nexum.core.errors import Conflict, PolicyRefused, ValidationFailed
from nexum.core.resolution.model import ESCALATE_UNREACHABLE, Bundle, EscalationSpec
from nexum.core.resolution.settlements import Settlement, settles


class PlanGateClosed(PolicyRefused):
    code = "plan_gate_closed"


class EscalationAlreadyResolved(Conflict):
    code = "escalation_resolved"


def gaps_of(bundle: Bundle) -> tuple[EscalationSpec, ...]:
    """Every gap of the bundle that matters: its escalations, plus one per source that could not answer
    (an unavailable source leaves the bundle incomplete, R11, and a human must see it).
    Sorted, one per key."""
    gaps = list(bundle.escalations)
    for error in bundle.source_errors:
        gaps.append(
            EscalationSpec(
                kind=ESCALATE_UNREACHABLE,
                missing=f"content from source {error.source!r}",
                reason=f"source unavailable ({error.kind}): {error.reason}",
                sources=(error.source,),
            )
        )
    unique: dict[str, EscalationSpec] = {}
    for gap in gaps:
        unique.setdefault(gap.key, gap)
    return tuple(sorted(unique.values(), key=lambda e: (e.kind, e.missing, e.key)))


def evidence_of(gap: EscalationSpec, bundle: Bundle) -> tuple[dict[str, Any], ...]:
    """The items on each side of a gap, with their origins (no text): conflict members, or the items it
    names."""
    members: list[dict[str, Any]] = []
    if gap.conflict_group is not None:
        for group in bundle.conflict_groups:
            if group.group_id == gap.conflict_group:
                members = [
                    {
                        "digest": m.digest,
                        "source": m.source,
                        "locator": m.locator,
                        "revision": m.revision,
                        "trust_class": m.trust_class.name,
                        "observed_at": m.to_dict()["observed_at"],
                        "claim_digest": m.to_dict()["claim_digest"],
                    }
                    for m in group.members
                ]
    if not members:
        by_digest = {item.digest: item for item in bundle.items}
        for digest in gap.item_digests:
            item = by_digest.get(digest)
            members.append(
                {"digest": digest}
                if item is None
                else {
                    "digest": digest,
                    "source": item.source,
                    "locator": item.locator,
                    "revision": item.revision,
                    "trust_class": item.trust_class.name,
                    "observed_at": item.to_dict()["observed_at"],
                    "stale_reason": item.stale_reason,
                }
            )
    return tuple(members)


@dataclass(frozen=True)
class EscalationPlan:
    """What a resolve does to the task's escalations."""

    to_open: tuple[EscalationSpec, ...]
    still_open: tuple[str, ...]
    """Ids of open escalations the new bundle still shows."""
    to_close: tuple[str, ...]
    """Ids of open escalations the new bundle no longer shows (closed as ``gap_closed``)."""


def plan_escalations(
    gaps: Sequence[EscalationSpec],
    *,
    open_by_key: Mapping[str, str],
    resolved_keys: Iterable[str],
    settlements: Sequence[Settlement] = (),
    narrowed: bool = False,
) -> EscalationPlan:
    """A gap already open stays open (no duplicate); a gap a human already resolved stays resolved (a picked
    side or a supplied fact is not asked again), and so does a conflict a human settled for the goal on
    another task (``settlements``); a new gap opens; an open gap that is gone is closed — unless the resolve
    was ``narrowed`` by its request (its own sources, query or budget): it saw only part of the context, so
    it may open gaps but closes none (else a caller could resolve around a conflict and open the plan gate
    without an operator)."""
    resolved = set(resolved_keys)
    keys = {gap.key for gap in gaps}
    to_open = tuple(
        gap
        for gap in gaps
        if gap.key not in open_by_key
        and gap.key not in resolved
        and not any(
            settles(s, kind=gap.kind, subjects=gap.subjects, members=gap.item_digests) for s in settlements
        )
    )
    kept = set(open_by_key) if narrowed else keys
    still_open = tuple(sorted(open_by_key[k] for k in kept if k in open_by_key))
    to_close = tuple(sorted(ident for key, ident in open_by_key.items() if key not in kept))
    return EscalationPlan(to_open=to_open, still_open=still_open, to_close=to_close)


def decide_plan_gate(
    *, has_bundle: bool, complete: bool, open_escalations: Sequence[Mapping[str, str]], overridden: bool
) -> None:
    """R9: a task cannot start while an escalation on it is open (every gap of an incomplete bundle is one),
    unless an operator overrode the gate for its latest bundle. A task never resolved has no known gap."""
    if not has_bundle or overridden or not open_escalations:
        return
    listed = "; ".join(f"{e['kind']}: {e['missing']}" for e in open_escalations[:5])
    raise PlanGateClosed(
        f"the plan gate is closed: {len(open_escalations)} open escalation(s) on this task ({listed}); "
        "resolve them or have an operator override",
        field="task_id",
        details={
            "bundle_complete": complete,
            "open_escalations": [dict(e) for e in open_escalations],
        },
    )


def decide_pick_side(evidence_digests: Sequence[str], chosen: Sequence[str]) -> tuple[str, ...]:
    """The digests rejected when ``chosen`` (one or more of the conflict's members) is picked."""
    members = list(dict.fromkeys(evidence_digests))
    picked = list(dict.fromkeys(chosen))
    if not picked:
        raise ValidationFailed("pick at least one side (an item digest of the conflict)", field="chosen")
    unknown = [digest for digest in picked if digest not in members]
    if unknown:
        raise ValidationFailed(f"{unknown[0]} is not an item of this conflict", field="chosen")
    rejected = tuple(digest for digest in members if digest not in picked)
    if not rejected:
        raise ValidationFailed("picking every side settles nothing; leave at least one out", field="chosen")
    return rejected
