"""The context resolver's pure rules (SPEC R1–R11): input checks, which grant applies now, which gaps open or
close an escalation, whether the plan gate lets a task start.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nexum.core.errors import Conflict, NotFound, PolicyRefused, ValidationFailed
from nexum.core.events import Event
from nexum.core.ids import RESOLUTION_IDS
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.events import SETTLING_ACTIONS
from nexum.core.resolution.model import (
    ESCALATE_CONFLICT,
    ESCALATE_UNREACHABLE,
    Bundle,
    Escalation,
    Grant,
    PlannedCall,
    RequiredQuestion,
    SourceResult,
)
from nexum.core.resolution.subjects import normalize_subject

SOURCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
MAX_QUESTIONS = 50
MAX_QUESTION_CHARS = 2000
MAX_REASON_CHARS = 2000
MAX_SCOPES = 100
"""The namespace of the resolver's derived ids (sources, grants, resolves, escalations)."""


class PlanGateClosed(PolicyRefused):
    code = "plan_gate_closed"


class EscalationAlreadyResolved(Conflict):
    code = "escalation_resolved"


# --- checks -------------------------------------------------------------------------------------------------


def check_source_name(name: Any) -> str:
    if not isinstance(name, str) or not SOURCE_NAME.fullmatch(name):
        raise ValidationFailed(
            "a source name is 1–100 letters, digits, '_', '.' or '-', starting with a letter or digit",
            field="name",
        )
    return name


def check_reason(reason: Any, *, field: str = "reason") -> str:
    if not isinstance(reason, str):
        raise ValidationFailed("reason must be a string", field=field)
    if len(reason) > MAX_REASON_CHARS:
        raise ValidationFailed(f"reason is longer than {MAX_REASON_CHARS} characters", field=field)
    return reason


def check_grant_scopes(scopes: Any) -> dict[str, tuple[str, ...]]:
    """``{source name: [scope, …]}``; an empty list means every scope the source declares (``*``). A name
    that cannot be a source's names no source: ``NotFound``, as for a name the project lacks."""
    if not isinstance(scopes, Mapping) or not scopes:
        raise ValidationFailed("a grant lists at least one source: {name: [scopes]}", field="sources")
    checked: dict[str, tuple[str, ...]] = {}
    for name, granted in scopes.items():
        if not isinstance(name, str) or not SOURCE_NAME.fullmatch(name):
            raise NotFound(f"no source {name!r}: not a source name", field="sources")
        if isinstance(granted, str) or not isinstance(granted, list | tuple):
            raise ValidationFailed(f"the scopes of {name!r} must be a list of strings", field="sources")
        if len(granted) > MAX_SCOPES or not all(isinstance(s, str) and s.strip() for s in granted):
            raise ValidationFailed(
                f"the scopes of {name!r} must be up to {MAX_SCOPES} non-empty strings", field="sources"
            )
        checked[name] = tuple(sorted(set(granted))) or ("*",)
    return dict(sorted(checked.items()))


def check_questions(questions: Any) -> tuple[RequiredQuestion, ...]:
    """``[{question, subjects: [...]}, …]`` → ``RequiredQuestion``s (subjects may be given as ``subject``)."""
    if isinstance(questions, str) or not isinstance(questions, list | tuple):
        raise ValidationFailed("questions must be a list", field="questions")
    if len(questions) > MAX_QUESTIONS:
        raise ValidationFailed(f"at most {MAX_QUESTIONS} required questions", field="questions")
    checked = []
    for entry in questions:
        if not isinstance(entry, Mapping):
            raise ValidationFailed("each question is an object {question, subjects}", field="questions")
        unknown = sorted(set(entry) - {"question", "subjects", "subject"})
        if unknown:
            raise ValidationFailed(f"unknown question member {unknown[0]!r}", field="questions")
        text = entry.get("question")
        subjects = entry.get("subjects", [entry["subject"]] if "subject" in entry else [])
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_QUESTION_CHARS:
            raise ValidationFailed(
                f"a question is a non-empty text of at most {MAX_QUESTION_CHARS} characters",
                field="questions",
            )
        if isinstance(subjects, str) or not isinstance(subjects, list | tuple):
            raise ValidationFailed("subjects must be a list of strings", field="questions")
        if not all(isinstance(s, str) and len(s) <= 500 for s in subjects):
            raise ValidationFailed("subjects must be strings of at most 500 characters", field="questions")
        checked.append(RequiredQuestion(question=text.strip(), subjects=tuple(subjects)))
    return tuple(checked)


def questions_to_data(questions: Iterable[RequiredQuestion]) -> tuple[dict[str, Any], ...]:
    return tuple({"question": q.question, "subjects": list(q.subjects)} for q in questions)


def questions_from_data(data: Iterable[Mapping[str, Any]]) -> tuple[RequiredQuestion, ...]:
    return tuple(RequiredQuestion(question=q["question"], subjects=tuple(q["subjects"])) for q in data)


# --- grants -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GrantRecord:
    """A grant as recorded (not revoked)."""

    scopes: Mapping[str, Sequence[str]]
    expires_at: datetime | None


def effective_grant(grants: Sequence[GrantRecord], now: datetime) -> Grant | None:
    """The one grant the resolver applies now: the union of the task's and its goal's grants in force.

    With none in force but some expired, the union of the expired ones with their latest expiry, so that every
    retrieval is denied as ``grant_expired`` (and says so). A source only named by an expired grant, while
    another grant is in force, is simply outside the grant.
    """
    active = [g for g in grants if g.expires_at is None or now < g.expires_at]
    chosen = active or list(grants)
    if not chosen:
        return None
    merged: dict[str, set[str]] = {}
    for grant in chosen:
        for name, scopes in grant.scopes.items():
            merged.setdefault(name, set()).update(scopes)
    expires_at = None
    if not active:
        expires_at = max(g.expires_at for g in chosen if g.expires_at is not None)
    return Grant(scopes={name: tuple(sorted(s)) for name, s in merged.items()}, expires_at=expires_at)


# --- queries ------------------------------------------------------------------------------------------------


def build_query(objective: str, inputs: Sequence[str], questions: Sequence[RequiredQuestion]) -> str:
    """What the resolver asks its sources for a step: its objective, inputs, and required questions."""
    parts = [objective, *inputs]
    for question in questions:
        parts.append(question.question)
        parts.extend(question.subjects)
    return " ".join(" ".join(part.split()) for part in parts if part and part.strip())[:4000]


# --- gaps and escalations -----------------------------------------------------------------------------------


def gaps_of(bundle: Bundle) -> tuple[Escalation, ...]:
    """Every gap of the bundle that matters: its escalations, plus one per source that could not answer
    (an unavailable source leaves the bundle incomplete, R11, and a human must see it).
    Sorted, one per key."""
    gaps = list(bundle.escalations)
    for error in bundle.source_errors:
        gaps.append(
            Escalation(
                kind=ESCALATE_UNREACHABLE,
                missing=f"content from source {error.source!r}",
                reason=f"source unavailable ({error.kind}): {error.reason}",
                sources=(error.source,),
            )
        )
    unique: dict[str, Escalation] = {}
    for gap in gaps:
        unique.setdefault(gap.key, gap)
    return tuple(sorted(unique.values(), key=lambda e: (e.kind, e.missing, e.key)))


def evidence_of(gap: Escalation, bundle: Bundle) -> tuple[dict[str, Any], ...]:
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

    to_open: tuple[Escalation, ...]
    still_open: tuple[str, ...]
    """Ids of open escalations the new bundle still shows."""
    to_close: tuple[str, ...]
    """Ids of open escalations the new bundle no longer shows (closed as ``gap_closed``)."""


def plan_escalations(
    gaps: Sequence[Escalation],
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


# --- goal-wide settlements (R5) -----------------------------------------------------------------------------


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


# --- a resolve's record (R2, R7, R8) ------------------------------------------------------------------------


def escalation_id_for(*, resolve_id: str, key: str) -> str:
    """The id of the escalation a resolve opens for the gap ``key`` (the same on a redelivery)."""
    return str(uuid.uuid5(RESOLUTION_IDS, f"escalation:{resolve_id}:{key}"))


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
) -> list[Event]:
    """What one resolve of a task records, in order: each call made (or failed), each denial, the bundle with
    the escalations it leaves open, the gaps it opens, and the open ones it closes (``plan_escalations``
    given the task's escalations by key and the goal's settlements). Ids and digests only, never text."""
    events: list[Event] = []
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
