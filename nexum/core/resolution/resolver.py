"""The context resolver's rules (SPEC R1–R8, R11): pure functions over plain values, no I/O.

How a service uses them:

1. ``plan_retrievals(grant, sources, now=…, requested=…)`` says which (source, scopes) may be called and which
   requests are denied (each ``Denial`` is recorded as an event by the service; R2).
2. The service calls only ``plan.calls`` and wraps each outcome in a ``SourceResult`` (items, or the error
   of a source that is down; R11).
3. ``resolve_bundle(...)`` applies trust (R3, R4), staleness (R6), conflicts (R5), the budget and the stopping
   rules (R7) and returns the ``Bundle`` (R8), named by its content digest.

Subjects are compared case-insensitively with whitespace collapsed; an item on a nested subject
(``"Deploy > Port"``, ``"src/app/x.py"``) also answers its parent (``"Deploy"``, ``"src/app"``); see
``subject_matches``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from nexum.core.digests import digest_of, sha256_hex
from nexum.core.durations import human_age, human_duration
from nexum.core.errors import ValidationFailed
from nexum.core.injection import looks_like_instruction
from nexum.core.roles import AGENT, OPERATOR, check_role, content_ceiling
from nexum.core.trust import TrustClass, effective_trust

LABEL_SUSPECTED_INSTRUCTION = "suspected_instruction"
LABEL_STALE = "stale"
LABEL_TRUST_DOWNGRADED = "trust_downgraded"
LABEL_CONFLICT = "conflict"
LABEL_AGENT_WRITABLE = "agent_writable"
"""The item comes from a source the executing agent can write (R4a)."""

RISKS = ("low", "medium", "high")

# Stop reasons (R7)
STOP_ANSWERED = "answered"
STOP_BUDGET_SPENT = "budget_spent"
STOP_UNREACHABLE = "unreachable"
STOP_DENIED = "denied"
STOP_EXHAUSTED = "exhausted"

# Escalation kinds
ESCALATE_CONFLICT = "conflict"
ESCALATE_STALE_ONLY = "stale_only"
ESCALATE_DENIED = "denied"
ESCALATE_UNREACHABLE = "unreachable"
ESCALATE_UNANSWERED = "unanswered"

# Denial codes (R2)
DENY_OUTSIDE_GRANT = "outside_grant"
DENY_SCOPE_NOT_GRANTED = "scope_not_granted"
DENY_GRANT_EXPIRED = "grant_expired"
DENY_UNKNOWN_SOURCE = "unknown_source"
DENY_SCOPE_NOT_DECLARED = "scope_not_declared"
DENY_NOT_PLANNED = "not_planned"

ANY_SCOPE = "*"
_SUBJECT_SEPARATORS = ("/", " > ", "#", "::")


def _require_aware(value: datetime, field_name: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValidationFailed(f"{field_name} must be a timezone-aware datetime", field=field_name)
    return value


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def normalize_subject(subject: str) -> str:
    return " ".join(subject.casefold().split())


def normalize_claim(text: str) -> str:
    """The form claims are compared in: case-folded, whitespace collapsed, trailing punctuation dropped."""
    return " ".join(text.casefold().split()).rstrip(" .;:!")


def subject_matches(item_subject: str | None, wanted: str) -> bool:
    """True when an item on ``item_subject`` speaks to ``wanted``: the same subject or one nested under it."""
    if not item_subject or not wanted.strip():
        return False
    have, want = normalize_subject(item_subject), normalize_subject(wanted)
    return have == want or any(have.startswith(want + sep) for sep in _SUBJECT_SEPARATORS)


def _document_of(locator: str) -> str:
    """The document a locator points into (``docs/a.md#install`` → ``docs/a.md``)."""
    return locator.split("#", 1)[0]


# --- values -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Freshness:
    """When a source's items go stale: after ``ttl_seconds``, and/or when the source's revision moves."""

    ttl_seconds: int | None = None
    track_revision: bool = False

    def __post_init__(self) -> None:
        if self.ttl_seconds is not None and (
            isinstance(self.ttl_seconds, bool)
            or not isinstance(self.ttl_seconds, int)
            or self.ttl_seconds <= 0
        ):
            raise ValidationFailed("ttl_seconds must be a positive integer", field="freshness.ttl_seconds")

    def to_dict(self) -> dict[str, Any]:
        return {"ttl_seconds": self.ttl_seconds, "track_revision": self.track_revision}


@dataclass(frozen=True)
class SourceSpec:
    """What the rules need to know about a declared source (R1). ``writable_by`` is who can change its
    content (a role): what the agent can write yields items at most ``agent_reported`` (R4a)."""

    name: str
    kind: str
    declared_scopes: tuple[str, ...]
    highest_trust: TrustClass
    freshness: Freshness = field(default_factory=Freshness)
    writable_by: str = OPERATOR

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip():
            raise ValidationFailed("a source needs a name", field="name")
        object.__setattr__(self, "declared_scopes", tuple(self.declared_scopes))
        object.__setattr__(self, "highest_trust", TrustClass.parse(self.highest_trust, field="highest_trust"))
        check_role(self.writable_by, field="writable_by")


@dataclass(frozen=True)
class RetrievedItem:
    """One piece of retrieved content with its provenance. ``digest`` (sha256 of ``text``) and ``claim``
    (normalized text, used for conflict detection) are computed when not given."""

    source: str
    locator: str
    text: str
    trust_class: TrustClass
    observed_at: datetime
    revision: str | None = None
    subject: str | None = None
    claim: str = ""
    digest: str = ""
    signature: str | None = None
    labels: tuple[str, ...] = ()
    stale: bool = False
    stale_reason: str | None = None
    downgrade_reason: str | None = None
    conflict_group: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ValidationFailed("item text must be a string", field="text")
        _require_aware(self.observed_at, "observed_at")
        object.__setattr__(self, "trust_class", TrustClass.parse(self.trust_class))
        text_digest = sha256_hex(self.text)
        if self.digest and self.digest != text_digest:
            raise ValidationFailed("item digest does not match its text", field="digest")
        object.__setattr__(self, "digest", text_digest)
        object.__setattr__(self, "claim", normalize_claim(self.claim or self.text))
        object.__setattr__(self, "labels", tuple(sorted(set(self.labels))))

    @property
    def suspected_instruction(self) -> bool:
        return LABEL_SUSPECTED_INSTRUCTION in self.labels

    def with_labels(self, *labels: str) -> RetrievedItem:
        return replace(self, labels=(*self.labels, *labels))

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "locator": self.locator,
            "revision": self.revision,
            "subject": self.subject,
            "claim_digest": sha256_hex(self.claim),
            "digest": self.digest,
            "text": self.text,
            "trust_class": self.trust_class.name,
            "observed_at": _iso(self.observed_at),
            "labels": list(self.labels),
            "stale": self.stale,
            "stale_reason": self.stale_reason,
            "downgrade_reason": self.downgrade_reason,
            "conflict_group": self.conflict_group,
        }


@dataclass(frozen=True)
class Grant:
    """What the resolver may read: source name → granted scopes (``"*"`` = every scope the source declares).

    A scope covers another when equal, when it is a path prefix ending in ``/``, or when it is a glob that
    matches it (``scope_covers``)."""

    scopes: Mapping[str, tuple[str, ...]]
    expires_at: datetime | None = None

    def __post_init__(self) -> None:
        normalized = {str(name): tuple(sorted(set(scopes))) for name, scopes in dict(self.scopes).items()}
        object.__setattr__(self, "scopes", normalized)
        if self.expires_at is not None:
            _require_aware(self.expires_at, "expires_at")

    @property
    def source_names(self) -> frozenset[str]:
        return frozenset(self.scopes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scopes": {name: list(scopes) for name, scopes in sorted(self.scopes.items())},
            "expires_at": _iso(self.expires_at),
        }


@dataclass(frozen=True)
class Denial:
    source: str
    scopes: tuple[str, ...]
    code: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "scopes": list(self.scopes), "code": self.code, "reason": self.reason}


@dataclass(frozen=True)
class PlannedCall:
    source: str
    scopes: tuple[str, ...]


@dataclass(frozen=True)
class RetrievalPlan:
    calls: tuple[PlannedCall, ...]
    denials: tuple[Denial, ...]

    def scopes_for(self, source: str) -> tuple[str, ...] | None:
        for call in self.calls:
            if call.source == source:
                return call.scopes
        return None


@dataclass(frozen=True)
class SourceResult:
    """The outcome of calling one source: its items, or the error that kept it from answering (R11).
    ``writable_by`` is who could change the source when it was read (a folder that became a symlink into the
    workspace since it was registered is the agent's now); ``None`` when the source did not say."""

    source: str
    items: tuple[RetrievedItem, ...] = ()
    error: str | None = None
    error_kind: str | None = None  # unreachable | timeout | error
    current_revision: str | None = None
    writable_by: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))
        if self.error is not None and self.error_kind is None:
            object.__setattr__(self, "error_kind", "error")

    @classmethod
    def ok(
        cls,
        source: str,
        items: Iterable[RetrievedItem],
        current_revision: str | None = None,
        writable_by: str | None = None,
    ) -> SourceResult:
        return cls(
            source=source, items=tuple(items), current_revision=current_revision, writable_by=writable_by
        )

    @classmethod
    def failed(cls, source: str, error: str, kind: str = "unreachable") -> SourceResult:
        return cls(source=source, error=error, error_kind=kind)


@dataclass(frozen=True)
class SourceError:
    source: str
    kind: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "reason": self.reason}


@dataclass(frozen=True)
class RequiredQuestion:
    """A question the step needs answered, and the subject(s) whose items answer it (any one suffices)."""

    question: str
    subjects: tuple[str, ...]

    def __post_init__(self) -> None:
        subjects = tuple(s for s in self.subjects if isinstance(s, str) and s.strip())
        if not self.question or not subjects:
            raise ValidationFailed(
                "a required question needs its text and at least one subject", field="questions"
            )
        object.__setattr__(self, "subjects", subjects)


@dataclass(frozen=True)
class ResolveBudget:
    max_items: int
    max_tokens: int

    def __post_init__(self) -> None:
        for name in ("max_items", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationFailed(f"{name} must be a non-negative integer", field=f"budget.{name}")


@dataclass(frozen=True)
class ConflictGroup:
    """Items making different claims about one subject, all kept with their provenance (R5)."""

    group_id: str
    subject: str
    members: tuple[RetrievedItem, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "subject": self.subject,
            "members": [
                {
                    "source": m.source,
                    "locator": m.locator,
                    "revision": m.revision,
                    "digest": m.digest,
                    "claim_digest": sha256_hex(m.claim),
                    "trust_class": m.trust_class.name,
                    "observed_at": _iso(m.observed_at),
                }
                for m in self.members
            ],
        }


@dataclass(frozen=True)
class LeftOut:
    source: str
    locator: str
    digest: str
    tokens: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "locator": self.locator,
            "digest": self.digest,
            "tokens": self.tokens,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class QuestionStatus:
    question: str
    subjects: tuple[str, ...]
    status: str  # answered | conflict | stale_only | unanswered
    item_digests: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "subjects": list(self.subjects),
            "status": self.status,
            "item_digests": list(self.item_digests),
        }


@dataclass(frozen=True)
class Escalation:
    """A gap that matters, for a human: what is missing and why."""

    kind: str
    missing: str
    reason: str
    subjects: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    item_digests: tuple[str, ...] = ()
    conflict_group: str | None = None

    @property
    def key(self) -> str:
        """Stable identity of this gap, for idempotent recording."""
        return digest_of({"kind": self.kind, "missing": self.missing, "conflict_group": self.conflict_group})

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "kind": self.kind,
            "missing": self.missing,
            "reason": self.reason,
            "subjects": list(self.subjects),
            "sources": list(self.sources),
            "item_digests": list(self.item_digests),
            "conflict_group": self.conflict_group,
        }


@dataclass(frozen=True)
class Bundle:
    """The resolver's output (R8), named by ``digest`` over its canonical serialization."""

    items: tuple[RetrievedItem, ...]
    left_out_by_budget: tuple[LeftOut, ...]
    denials: tuple[Denial, ...]
    source_errors: tuple[SourceError, ...]
    conflict_groups: tuple[ConflictGroup, ...]
    questions: tuple[QuestionStatus, ...]
    escalations: tuple[Escalation, ...]
    stop_reason: str
    complete: bool
    incomplete_reasons: tuple[str, ...]
    risk: str
    tokens_used: int
    digest: str = ""

    @property
    def needs_escalation(self) -> bool:
        """Incomplete in a way that matters: the plan gate (R9) holds the task while this is true."""
        return bool(self.escalations)

    @property
    def item_digests(self) -> tuple[str, ...]:
        return tuple(item.digest for item in self.items)

    def content(self) -> dict[str, Any]:
        """Everything the digest covers (the bundle minus its own digest)."""
        return {
            "items": [item.to_dict() for item in self.items],
            "left_out_by_budget": [left.to_dict() for left in self.left_out_by_budget],
            "denials": [denial.to_dict() for denial in self.denials],
            "source_errors": [error.to_dict() for error in self.source_errors],
            "conflict_groups": [group.to_dict() for group in self.conflict_groups],
            "questions": [question.to_dict() for question in self.questions],
            "escalations": [escalation.to_dict() for escalation in self.escalations],
            "stop_reason": self.stop_reason,
            "complete": self.complete,
            "incomplete_reasons": list(self.incomplete_reasons),
            "risk": self.risk,
            "tokens_used": self.tokens_used,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.content(), "digest": self.digest}


# --- authorization (R2) -----------------------------------------------------------------------------------


def scope_covers(granted: str, requested: str) -> bool:
    """Does the granted scope include the requested one? Equal, ``*``, a ``/``-ended prefix, or a glob."""
    if granted in (ANY_SCOPE, requested):
        return True
    if requested == ANY_SCOPE:
        return False
    if granted.endswith("/") and requested.startswith(granted):
        return True
    return any(ch in granted for ch in "*?[") and fnmatchcase(requested, granted)


def authorize(
    grant: Grant | None, source: str, scopes: Sequence[str], now: datetime
) -> tuple[tuple[str, ...], Denial | None]:
    """The scopes of ``source`` that ``grant`` allows now, and the denial for the rest (``None`` if none)."""
    _require_aware(now, "now")
    requested = tuple(sorted(set(scopes)))
    if grant is None:
        return (), Denial(source, requested, DENY_OUTSIDE_GRANT, "no grant covers this task")
    if grant.expires_at is not None and now >= grant.expires_at:
        return (), Denial(source, requested, DENY_GRANT_EXPIRED, f"grant expired at {_iso(grant.expires_at)}")
    if source not in grant.scopes:
        return (), Denial(source, requested, DENY_OUTSIDE_GRANT, f"source {source!r} is outside the grant")
    granted = grant.scopes[source]
    allowed = tuple(scope for scope in requested if any(scope_covers(g, scope) for g in granted))
    refused = tuple(scope for scope in requested if scope not in allowed)
    if refused:
        return allowed, Denial(
            source,
            refused,
            DENY_SCOPE_NOT_GRANTED,
            f"scope(s) {', '.join(refused)} not granted on {source!r}",
        )
    return allowed, None


def plan_retrievals(
    grant: Grant | None,
    sources: Sequence[SourceSpec],
    *,
    now: datetime,
    requested: Mapping[str, Sequence[str]] | None = None,
) -> RetrievalPlan:
    """Which sources may be called with which scopes, and what is denied. ``requested`` defaults to every
    declared source with all its declared scopes; a requested scope must be one the source declares."""
    by_name = {spec.name: spec for spec in sources}
    if requested is None:
        requested = {spec.name: spec.declared_scopes for spec in sources}
    calls: list[PlannedCall] = []
    denials: list[Denial] = []
    for name in sorted(requested):
        scopes = tuple(sorted(set(requested[name])))
        spec = by_name.get(name)
        if spec is None:
            denials.append(Denial(name, scopes, DENY_UNKNOWN_SOURCE, f"no source named {name!r} is declared"))
            continue
        if not scopes:
            scopes = spec.declared_scopes
        undeclared = tuple(s for s in scopes if not any(scope_covers(d, s) for d in spec.declared_scopes))
        if undeclared:
            denials.append(
                Denial(
                    name,
                    undeclared,
                    DENY_SCOPE_NOT_DECLARED,
                    f"scope(s) {', '.join(undeclared)} not declared by source {name!r}",
                )
            )
            scopes = tuple(s for s in scopes if s not in undeclared)
            if not scopes:
                continue
        allowed, denial = authorize(grant, name, scopes, now)
        if denial is not None:
            denials.append(denial)
        if allowed:
            calls.append(PlannedCall(name, allowed))
    return RetrievalPlan(calls=tuple(calls), denials=tuple(denials))


# --- staleness (R6) ---------------------------------------------------------------------------------------


def staleness_of(
    item: RetrievedItem, source_freshness: Freshness, current_revision: str | None, now: datetime
) -> tuple[bool, str | None]:
    """Whether ``item`` is stale, and why: older than the source's TTL, or the source's revision has moved
    since the item was read (an unknown current revision never makes an item stale). The age is measured
    against ``now``, the resolve's own time, never the clock (the bundle stores the reason, so a compile that
    renders it reads no clock either), and said in human units ("observed 3 years ago (TTL 30 days)")."""
    _require_aware(now, "now")
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


# --- conflicts (R5) ---------------------------------------------------------------------------------------


def conflict_groups(items: Iterable[RetrievedItem]) -> tuple[ConflictGroup, ...]:
    """Items on the same subject whose claims differ form one group (all items on that subject, so every side
    keeps its provenance). Parts of one document (same source, same locator before ``#``) never conflict with
    each other. The group id is the digest of the sorted member digests."""
    by_subject: dict[str, list[RetrievedItem]] = defaultdict(list)
    for item in items:
        if item.subject and item.subject.strip():
            by_subject[normalize_subject(item.subject)].append(item)
    groups = []
    for subject, members in by_subject.items():
        unique = {(m.source, m.locator, m.digest): m for m in members}
        ordered = sorted(unique.values(), key=lambda m: (m.digest, m.source, m.locator))
        disagree = any(
            a.claim != b.claim and (a.source, _document_of(a.locator)) != (b.source, _document_of(b.locator))
            for i, a in enumerate(ordered)
            for b in ordered[i + 1 :]
        )
        if disagree:
            group_id = digest_of(sorted(m.digest for m in ordered))
            groups.append(ConflictGroup(group_id=group_id, subject=subject, members=tuple(ordered)))
    return tuple(sorted(groups, key=lambda g: (g.group_id, g.subject)))


def _phrase_in(subject: str, text: str) -> bool:
    return (
        re.search(r"(?<!\w)" + re.escape(normalize_subject(subject)) + r"(?!\w)", normalize_subject(text))
        is not None
    )


def _related(subject: str, other: str) -> bool:
    return subject_matches(subject, other) or subject_matches(other, subject)


def conflict_touches_plan(
    group: ConflictGroup,
    step_inputs: Sequence[str],
    success_criteria: Sequence[str],
    required_questions: Sequence[RequiredQuestion],
) -> bool:
    """A conflict touches the plan when its subject is (or nests with) a step input, a required question's
    subject, or is named in a step input or success criterion."""
    for question in required_questions:
        if any(_related(group.subject, subject) for subject in question.subjects):
            return True
    for text in (*step_inputs, *success_criteria):
        if text and (_related(group.subject, text) or _phrase_in(group.subject, text)):
            return True
    return False


# --- the bundle (R7, R8, R11) -----------------------------------------------------------------------------


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


def resolve_bundle(
    *,
    grant: Grant | None,
    sources: Sequence[SourceSpec],
    results: Sequence[SourceResult],
    questions: Sequence[RequiredQuestion],
    budget: ResolveBudget,
    risk: str,
    now: datetime,
    count_tokens: Callable[[str], int],
    signing_key: bytes | str | None = None,
    requested: Mapping[str, Sequence[str]] | None = None,
    step_inputs: Sequence[str] = (),
    success_criteria: Sequence[str] = (),
) -> Bundle:
    """Assemble the bundle from results already fetched. Deterministic: the order of sources, results and
    items does not change the bundle or its digest.

    Results from a source the plan did not allow are discarded and recorded as denials; a planned source
    without a result counts as unreachable. Items answering required questions are selected first, then items
    on the plan's subjects, then the rest; fresh before stale, higher trust first. Members of a conflict group
    are taken together when they fit. The budget is never exceeded; what does not fit is listed with why.

    The phases: gather the candidates (``_gather``), group the conflicts (``_mark_conflicts``), order
    (``_selection_order``) and pack them (``_pack``), find the gaps (``_question_gaps``, ``_conflict_gaps``,
    ``_unreachable_gaps``), and say why the resolver stopped (``_stop_reason``).
    """
    _require_aware(now, "now")
    if risk not in RISKS:
        raise ValidationFailed(f"risk must be one of {', '.join(RISKS)}", field="risk")
    questions = tuple(questions)
    plan = plan_retrievals(grant, sources, now=now, requested=requested)
    gathered = _gather(plan, {spec.name: spec for spec in sources}, results, signing_key, now)
    candidates, groups = _mark_conflicts(gathered.candidates)
    ordered = _selection_order(candidates, questions, tuple(step_inputs) + tuple(success_criteria))
    packed = _pack(ordered, budget, count_tokens)
    statuses, gaps = _question_gaps(questions, packed, candidates, risk, gathered)
    gaps += _conflict_gaps(groups, step_inputs, success_criteria, questions)
    if risk == "high":  # a source that is down matters on its own for a high-risk step (R11)
        gaps += _unreachable_gaps(gathered.errors)

    answered = all(status.status in (STOP_ANSWERED, ESCALATE_CONFLICT) for status in statuses)
    escalations = sorted({e.key: e for e in gaps}.values(), key=lambda e: (e.kind, e.missing, e.key))
    errors, denials = gathered.errors, gathered.denials
    incomplete_reasons = [
        f"source {e.source!r} unavailable ({e.kind}): {e.reason}"
        for e in sorted(errors, key=lambda e: (e.source, e.kind, e.reason))
    ]
    incomplete_reasons += [f"{e.kind}: {e.missing} — {e.reason}" for e in escalations]
    bundle = Bundle(
        items=packed.selected,
        left_out_by_budget=packed.left_out,
        denials=tuple(sorted(set(denials), key=lambda d: (d.source, d.code, d.scopes, d.reason))),
        source_errors=tuple(sorted(set(errors), key=lambda e: (e.source, e.kind, e.reason))),
        conflict_groups=groups,
        questions=tuple(statuses),
        escalations=tuple(escalations),
        stop_reason=_stop_reason(questions, answered, packed, gathered, plan),
        complete=not errors and not escalations and answered,
        incomplete_reasons=tuple(incomplete_reasons),
        risk=risk,
        tokens_used=packed.tokens_used,
    )
    return replace(bundle, digest=digest_of(bundle.content()))


ItemKey = tuple[str, str, str]
"""An item's identity in one resolve: source, locator, digest."""


def _key(item: RetrievedItem | LeftOut) -> ItemKey:
    return (item.source, item.locator, item.digest)


@dataclass(frozen=True)
class _Gathered:
    candidates: dict[ItemKey, RetrievedItem]
    denials: list[Denial]
    errors: list[SourceError]


def _gather(
    plan: RetrievalPlan,
    specs: Mapping[str, SourceSpec],
    results: Sequence[SourceResult],
    signing_key: bytes | str | None,
    now: datetime,
) -> _Gathered:
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
            candidates[_key(prepared)] = prepared
    for call in plan.calls:
        if call.source not in reported:
            errors.append(SourceError(call.source, "unreachable", "the source reported no result"))
    return _Gathered(candidates, denials, errors)


def _mark_conflicts(
    candidates: Mapping[ItemKey, RetrievedItem],
) -> tuple[dict[ItemKey, RetrievedItem], tuple[ConflictGroup, ...]]:
    """The candidates with each conflict group's members labelled and given the group's id (R5)."""
    groups = conflict_groups(candidates.values())
    marked = dict(candidates)
    for group in groups:
        for member in group.members:
            ident = _key(member)
            marked[ident] = replace(marked[ident], conflict_group=group.group_id).with_labels(LABEL_CONFLICT)
    return marked, groups


def _selection_order(
    candidates: Mapping[ItemKey, RetrievedItem],
    questions: Sequence[RequiredQuestion],
    plan_subjects: Sequence[str],
) -> list[RetrievedItem]:
    """Items answering required questions first (in question order), then items on the plan's subjects,
    then the rest; within each, fresh before stale, higher trust first, suspected instructions last."""

    def priority(item: RetrievedItem) -> tuple[Any, ...]:
        answers = [
            i for i, q in enumerate(questions) if any(subject_matches(item.subject, s) for s in q.subjects)
        ]
        on_plan = any(_related(item.subject, s) for s in plan_subjects) if item.subject else False
        tier = 0 if answers else (1 if on_plan else 2)
        return (
            tier,
            min(answers, default=len(questions)),
            item.stale,
            -int(item.trust_class),
            item.suspected_instruction,
            item.source,
            item.locator,
            item.digest,
        )

    return sorted(candidates.values(), key=priority)


@dataclass(frozen=True)
class _Packed:
    selected: tuple[RetrievedItem, ...]
    left_out: tuple[LeftOut, ...]
    tokens_used: int


def _pack(
    ordered: Sequence[RetrievedItem], budget: ResolveBudget, count_tokens: Callable[[str], int]
) -> _Packed:
    """Take the items in order while they fit the budget; a conflict group's members together when the whole
    group fits, else one by one. What does not fit is left out with why."""
    token_cache: dict[str, int] = {}

    def tokens_of(item: RetrievedItem) -> int:
        if item.digest not in token_cache:
            token_cache[item.digest] = int(count_tokens(item.text))
        return token_cache[item.digest]

    selected: list[RetrievedItem] = []
    left_out: list[LeftOut] = []
    considered: set[ItemKey] = set()
    tokens_used = 0

    def fits(unit: Sequence[RetrievedItem]) -> bool:
        return len(selected) + len(unit) <= budget.max_items and tokens_used + sum(map(tokens_of, unit)) <= (
            budget.max_tokens
        )

    for item in ordered:
        ident = _key(item)
        if ident in considered:
            continue
        unit = [item]
        if item.conflict_group is not None:
            unit = [m for m in ordered if m.conflict_group == item.conflict_group]
            unit = [m for m in unit if _key(m) not in considered]
            if not fits(unit):
                unit = [item]  # the whole group does not fit: take its members one by one
        if fits(unit):
            for member in unit:
                selected.append(member)
                tokens_used += tokens_of(member)
                considered.add(_key(member))
            continue
        considered.add(ident)
        needed = tokens_of(item)
        if len(selected) >= budget.max_items:
            reason = f"item budget spent ({budget.max_items} items selected)"
        else:
            reason = f"needed {needed} tokens, {budget.max_tokens - tokens_used} left"
        left_out.append(LeftOut(item.source, item.locator, item.digest, needed, reason))
    return _Packed(tuple(selected), tuple(left_out), tokens_used)


def answers_questions(item: RetrievedItem) -> bool:
    """Whether an item may answer a required question (R4a): not what the agent says (``agent_reported``),
    not anything from a source the agent can write. The executing agent never unlocks its own plan gate."""
    return item.trust_class != TrustClass.agent_reported and LABEL_AGENT_WRITABLE not in item.labels


def _question_gaps(
    questions: Sequence[RequiredQuestion],
    packed: _Packed,
    candidates: Mapping[ItemKey, RetrievedItem],
    risk: str,
    gathered: _Gathered,
) -> tuple[list[QuestionStatus], list[Escalation]]:
    """Each required question's status (R7) and the gaps that escalate: only stale answers for a high-risk
    step, or no answer (cut by the budget, a source unreachable or denied, or none retrieved). What the agent
    wrote or can write never answers (R4a, ``answers_questions``): such an item on the subject is kept and
    informs, but the question stays unanswered, so it never closes an escalation or opens the plan gate."""
    denials, errors = gathered.denials, gathered.errors
    statuses: list[QuestionStatus] = []
    escalations: list[Escalation] = []
    denied_sources = tuple(sorted({d.source for d in denials}))
    error_sources = tuple(sorted({e.source for e in errors}))
    for question in questions:

        def on_subject(item: RetrievedItem, question: RequiredQuestion = question) -> bool:
            return any(subject_matches(item.subject, s) for s in question.subjects)

        speaking = [item for item in packed.selected if on_subject(item)]
        answering = [item for item in speaking if answers_questions(item)]
        informing = [item for item in speaking if not answers_questions(item)]
        digests = tuple(item.digest for item in answering)
        subjects_text = ", ".join(question.subjects)
        if answering and risk == "high" and all(item.stale for item in answering):
            statuses.append(
                QuestionStatus(question.question, question.subjects, ESCALATE_STALE_ONLY, digests)
            )
            escalations.append(
                Escalation(
                    kind=ESCALATE_STALE_ONLY,
                    missing=f"a fresh answer to: {question.question}",
                    reason="a high-risk step cannot rest only on stale items: "
                    + "; ".join(sorted({f"{i.source}:{i.locator}: {i.stale_reason}" for i in answering})),
                    subjects=question.subjects,
                    sources=tuple(sorted({i.source for i in answering})),
                    item_digests=digests,
                )
            )
            continue
        if answering:
            conflicted = any(item.conflict_group for item in answering)
            status = ESCALATE_CONFLICT if conflicted else STOP_ANSWERED
            statuses.append(QuestionStatus(question.question, question.subjects, status, digests))
            continue
        statuses.append(QuestionStatus(question.question, question.subjects, ESCALATE_UNANSWERED, ()))
        cut = [
            left
            for left in packed.left_out
            if on_subject(candidates[_key(left)]) and answers_questions(candidates[_key(left)])
        ]
        if cut:
            kind, why, involved = ESCALATE_UNANSWERED, "the answering items did not fit the budget", ()
        elif informing:
            kind, involved = ESCALATE_UNANSWERED, tuple(sorted({i.source for i in informing}))
            classes = ", ".join(sorted({i.trust_class.name for i in informing}))
            why = (
                f"only {classes} content the executing agent wrote or can write speaks to {subjects_text}: "
                "it informs, and never answers a required question"
            )
        elif errors:
            kind = ESCALATE_UNREACHABLE
            why = "; ".join(f"source {e.source!r} unavailable ({e.kind}): {e.reason}" for e in errors)
            involved = error_sources
        elif denials:
            kind = ESCALATE_DENIED
            why = "; ".join(f"{d.source}: {d.reason}" for d in denials)
            involved = denied_sources
        else:
            kind = ESCALATE_UNANSWERED
            why = f"no authorized source returned an item on {subjects_text}"
            involved = ()
        escalations.append(
            Escalation(
                kind=kind,
                missing=f"an answer to: {question.question}",
                reason=why,
                subjects=question.subjects,
                sources=involved,
                item_digests=tuple(left.digest for left in cut) or tuple(i.digest for i in informing),
            )
        )
    return statuses, escalations


def _conflict_gaps(
    groups: Sequence[ConflictGroup],
    step_inputs: Sequence[str],
    success_criteria: Sequence[str],
    questions: Sequence[RequiredQuestion],
) -> list[Escalation]:
    """Conflicts that touch the plan are surfaced, never settled by recency (R5)."""
    return [
        Escalation(
            kind=ESCALATE_CONFLICT,
            missing=f"which claim about {group.subject!r} holds",
            reason=f"{len(group.members)} items from "
            + ", ".join(sorted({f"{m.source}:{m.locator}" for m in group.members}))
            + " make different claims on a subject the plan depends on",
            subjects=(group.subject,),
            sources=tuple(sorted({m.source for m in group.members})),
            item_digests=tuple(m.digest for m in group.members),
            conflict_group=group.group_id,
        )
        for group in groups
        if conflict_touches_plan(group, step_inputs, success_criteria, questions)
    ]


def _unreachable_gaps(errors: Sequence[SourceError]) -> list[Escalation]:
    """For a high-risk step, every source that could not answer is a gap of its own (R11)."""
    return [
        Escalation(
            kind=ESCALATE_UNREACHABLE,
            missing=f"content from source {error.source!r}",
            reason=f"source unavailable ({error.kind}): {error.reason}; a high-risk step needs every "
            "declared source",
            sources=(error.source,),
        )
        for error in errors
    ]


def _stop_reason(
    questions: Sequence[RequiredQuestion],
    answered: bool,
    packed: _Packed,
    gathered: _Gathered,
    plan: RetrievalPlan,
) -> str:
    """Why the resolver stopped (R7): the questions answered, the budget spent, a source unreachable or
    denied, or the sources exhausted."""
    if questions and answered:
        return STOP_ANSWERED
    if packed.left_out:
        return STOP_BUDGET_SPENT
    if gathered.errors:
        return STOP_UNREACHABLE
    if gathered.denials and (questions or not plan.calls):
        return STOP_DENIED
    if questions:
        return STOP_EXHAUSTED
    return STOP_ANSWERED  # nothing was required and everything retrieved was considered
