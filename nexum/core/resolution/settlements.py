"""Goal-wide settlements of conflicts (R5): a conflict a human settled on one task is settled for every task
of the goal that sees the same subject.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nexum.core.resolution.events import SETTLING_ACTIONS
from nexum.core.resolution.model import ESCALATE_CONFLICT
from nexum.core.resolution.subjects import normalize_subject


@dataclass(frozen=True)
class Settlement:
    """A conflict a human settled (a side picked or a fact supplied): it applies to every task of the goal
    that sees the same subject. The members it rejected are left out wherever an item on that subject is
    compiled, and a conflict on that subject among its members (all or some: nothing new to decide) is not
    asked again, on any task of the goal."""

    escalation_id: str
    subject: str
    """Normalized (``normalize_subject``)."""
    members: frozenset[str]
    """The digests the human decided over."""
    rejected: frozenset[str]


def settlement_of(
    *,
    escalation_id: str,
    kind: str,
    subjects: Sequence[str],
    members: Iterable[str],
    resolution: str,
    detail: Mapping[str, Any],
) -> Settlement | None:
    """The settlement a resolved escalation makes, or ``None`` (not a conflict, or not settled by a human's
    pick or fact)."""
    if kind != ESCALATE_CONFLICT or resolution not in SETTLING_ACTIONS or not subjects:
        return None
    return Settlement(
        escalation_id=escalation_id,
        subject=normalize_subject(subjects[0]),
        members=frozenset(members),
        rejected=frozenset(detail.get("rejected", ())),
    )


def settles(settlement: Settlement, *, kind: str, subjects: Sequence[str], members: Iterable[str]) -> bool:
    """True when ``settlement`` already decides a conflict on ``subjects`` between ``members``."""
    seen = set(members)
    return (
        kind == ESCALATE_CONFLICT
        and bool(subjects)
        and bool(seen)
        and normalize_subject(subjects[0]) == settlement.subject
        and seen <= settlement.members
    )


def rejected_items(
    settlements: Iterable[Settlement], items: Iterable[tuple[str, str | None]]
) -> frozenset[str]:
    """The digests, among ``items`` (digest, subject), that a settlement of the goal rejected on that item's
    own subject."""
    rejected_by_subject: dict[str, set[str]] = {}
    for settlement in settlements:
        rejected_by_subject.setdefault(settlement.subject, set()).update(settlement.rejected)
    return frozenset(
        digest
        for digest, subject in items
        if subject and digest in rejected_by_subject.get(normalize_subject(subject), ())
    )


def settled_detail(detail: Mapping[str, Any], *, settled_by: str, members: Iterable[str]) -> dict[str, Any]:
    """What a conflict on another task of the goal records when ``settled_by`` settles it: the same decision,
    limited to the members that task saw."""
    seen = set(members)
    recorded: dict[str, Any] = {"settled_by": settled_by}
    for name in ("chosen", "rejected"):
        if name in detail:
            recorded[name] = [digest for digest in detail[name] if digest in seen]
    if "fact_id" in detail:
        recorded["fact_id"] = detail["fact_id"]
    return recorded
