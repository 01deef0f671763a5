"""The resolver's values (SPEC R1–R8, R11) and their constants: what it reads (sources, grants, retrieved
items, results), what it is asked (required questions, the budget), and what it returns (the ``Bundle``, with
its conflict groups, items left out, question statuses and escalations).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from nexum.core.digests import digest_of, sha256_hex
from nexum.core.errors import ValidationFailed
from nexum.core.resolution.subjects import normalize_claim
from nexum.core.roles import OPERATOR, validate_role
from nexum.core.trust import TrustClass

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


def require_aware(value: datetime, field_name: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValidationFailed(f"{field_name} must be a timezone-aware datetime", field=field_name)
    return value


def utc_iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


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
        validate_role(self.writable_by, field="writable_by")


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
        require_aware(self.observed_at, "observed_at")
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
            "observed_at": utc_iso(self.observed_at),
            "labels": list(self.labels),
            "stale": self.stale,
            "stale_reason": self.stale_reason,
            "downgrade_reason": self.downgrade_reason,
            "conflict_group": self.conflict_group,
        }


@dataclass(frozen=True)
class GrantedScopes:
    """What the resolver may read: source name → granted scopes (``"*"`` = every scope the source declares).

    A scope covers another when equal, when it is a path prefix ending in ``/``, or when it is a glob that
    matches it (``scope_covers``)."""

    scopes: Mapping[str, tuple[str, ...]]
    expires_at: datetime | None = None

    def __post_init__(self) -> None:
        normalized = {str(name): tuple(sorted(set(scopes))) for name, scopes in dict(self.scopes).items()}
        object.__setattr__(self, "scopes", normalized)
        if self.expires_at is not None:
            require_aware(self.expires_at, "expires_at")

    @property
    def source_names(self) -> frozenset[str]:
        return frozenset(self.scopes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scopes": {name: list(scopes) for name, scopes in sorted(self.scopes.items())},
            "expires_at": utc_iso(self.expires_at),
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
                    "observed_at": utc_iso(m.observed_at),
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
class EscalationSpec:
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
    escalations: tuple[EscalationSpec, ...]
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


ItemKey = tuple[str, str, str]
"""An item's identity in one resolve: source, locator, digest."""


def item_key(item: RetrievedItem | LeftOut) -> ItemKey:
    return (item.source, item.locator, item.digest)
