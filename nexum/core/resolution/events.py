"""The context resolver's events (SPEC R1–R11): sources, grants, required questions, retrievals, bundles,
escalations and plan-gate overrides; their streams and the values they carry.

``resolver.py`` assembles one bundle from results already fetched (its values in ``model.py``, its phases in
the modules beside it); ``authorization.py``, ``checks.py``, ``escalations.py``, ``settlements.py`` and
``record.py`` hold the pure decisions the services take on these events.

Events about a resolve carry ids, digests and provenance (source, locator, trust class), never an item's text:
the bundle's content is stored by its digest outside the log (R10).

Streams: ``source-<id>`` (one per source, id derived from project and name), ``grant-<id>``,
``questions-<task_id>``, and ``context-<task_id>``: every resolve of a task, its retrievals and denials, its
escalations and their resolutions, and plan-gate overrides, so one stream version guards the task's context.
A queued resolve (``async``) is a request of its own, ``resolve-request-<request_id>``: asked for, then
answered (the resolve it made) or failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nexum.core.events import DomainEvent, event_type, upcaster
from nexum.core.roles import OPERATOR

# How an escalation was resolved
RESOLVE_SUPPLY_FACT = "supply_fact"
RESOLVE_PICK_SIDE = "pick_side"
RESOLVE_GRANT_SOURCE = "grant_source"
RESOLVE_CANCEL = "cancel"
RESOLVE_GAP_CLOSED = "gap_closed"
"""Closed by the system: a later resolve no longer shows the gap."""
RESOLUTION_ACTIONS = (RESOLVE_SUPPLY_FACT, RESOLVE_PICK_SIDE, RESOLVE_GRANT_SOURCE, RESOLVE_CANCEL)
SETTLING_ACTIONS = (RESOLVE_PICK_SIDE, RESOLVE_SUPPLY_FACT)
"""The resolutions of a conflict that settle it for the whole goal (see ``settlements.Settlement``)."""

REQUEST_QUEUED = "queued"
REQUEST_DONE = "done"
REQUEST_FAILED = "failed"
REQUEST_STATUSES = (REQUEST_QUEUED, REQUEST_DONE, REQUEST_FAILED)
"""The states of a queued resolve."""

ESCALATION_OPEN = "open"
ESCALATION_RESOLVED = "resolved"

NEEDS_MORE_CONTEXT = "needs_more_context"


def source_stream(source_id: str) -> str:
    return f"source-{source_id}"


def grant_stream(grant_id: str) -> str:
    return f"grant-{grant_id}"


def questions_stream(task_id: str) -> str:
    return f"questions-{task_id}"


def context_stream(task_id: str) -> str:
    return f"context-{task_id}"


def resolve_request_stream(request_id: str) -> str:
    return f"resolve-request-{request_id}"


# --- events -------------------------------------------------------------------------------------------------


@event_type("SourceRegistered", version=2)
@dataclass(frozen=True)
class SourceRegistered(DomainEvent):
    """A source of the project (R1): its kind and configuration (never a secret), scopes, trust, freshness,
    and who can write it (``agent`` or ``operator``, R4a; ``highest_trust`` is already capped by it)."""

    source_id: str
    name: str
    kind: str
    config: dict[str, Any]
    declared_scopes: tuple[str, ...]
    highest_trust: str
    ttl_seconds: int | None
    track_revision: bool
    writable_by: str


@upcaster("SourceRegistered", from_version=1)
def _source_registered_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 did not say who can write the source: the operator, as it was taken then (every resolve
    derives it again from the path as read, so a folder the agent can write is capped all the same)."""
    return {**data, "writable_by": OPERATOR}


@event_type("GrantIssued")
@dataclass(frozen=True)
class GrantIssued(DomainEvent):
    """What the resolver may read for a goal (``task_id`` None) or one task (R2): source name → scopes."""

    grant_id: str
    goal_id: str
    task_id: str | None
    scopes: dict[str, Any]
    expires_at: str | None
    reason: str
    derived_from: tuple[str, ...] = ()


@event_type("GrantRevoked")
@dataclass(frozen=True)
class GrantRevoked(DomainEvent):
    grant_id: str
    reason: str


@event_type("RequiredQuestionsSet")
@dataclass(frozen=True)
class RequiredQuestionsSet(DomainEvent):
    """The questions a task's step needs answered (R7), each with the subjects whose items answer it."""

    task_id: str
    goal_id: str
    questions: tuple[dict[str, Any], ...]


@event_type("RetrievalPerformed")
@dataclass(frozen=True)
class RetrievalPerformed(DomainEvent):
    """One call of a source within a grant: the query, the scopes, the digests of what came back, or why the
    source could not answer (``outcome`` ``failed``). Never the content."""

    resolve_id: str
    task_id: str
    goal_id: str
    source: str
    scopes: tuple[str, ...]
    query: str
    outcome: str
    item_digests: tuple[str, ...]
    error_kind: str | None = None
    error: str | None = None


@event_type("RetrievalDenied")
@dataclass(frozen=True)
class RetrievalDenied(DomainEvent):
    """A retrieval the grant does not allow (R2): nothing was read."""

    resolve_id: str
    task_id: str
    goal_id: str
    source: str
    scopes: tuple[str, ...]
    code: str
    reason: str
    query: str


@event_type("BundleResolved")
@dataclass(frozen=True)
class BundleResolved(DomainEvent):
    """A resolve's outcome (R8): the bundle's digest (its content is stored by digest), the provenance of its
    items (digest, source, locator, trust class, staleness, conflict group, labels; no text), and the
    escalations it leaves open."""

    resolve_id: str
    task_id: str
    goal_id: str
    bundle_digest: str
    complete: bool
    stop_reason: str
    risk: str
    items: tuple[dict[str, Any], ...]
    escalation_ids: tuple[str, ...]
    left_out_count: int
    denial_count: int
    source_error_count: int
    tokens_used: int


@event_type("EscalationOpened")
@dataclass(frozen=True)
class EscalationOpened(DomainEvent):
    """A gap that matters (R5–R7, ``needs_more_context``): what is missing, why, and the evidence on each
    side (item digests with their origins)."""

    escalation_id: str
    task_id: str
    goal_id: str
    resolve_id: str
    bundle_digest: str
    key: str
    kind: str
    missing: str
    why: str
    subjects: tuple[str, ...]
    sources: tuple[str, ...]
    conflict_group: str | None
    evidence: tuple[dict[str, Any], ...]


@event_type("EscalationResolved")
@dataclass(frozen=True)
class EscalationResolved(DomainEvent):
    """How a gap was closed: a supplied fact, a side picked (the others kept, marked rejected), a source
    granted, the task cancelled, or (``gap_closed``) a later resolve that no longer shows it."""

    escalation_id: str
    task_id: str
    resolution: str
    detail: dict[str, Any]
    reason: str


@event_type("PlanGateOverridden")
@dataclass(frozen=True)
class PlanGateOverridden(DomainEvent):
    """An operator lets the task start despite the open gaps of its latest bundle (R9)."""

    task_id: str
    resolve_id: str
    bundle_digest: str
    reason: str


@event_type("ContextResolveRequested")
@dataclass(frozen=True)
class ContextResolveRequested(DomainEvent):
    """A resolve was queued (``async``) for a worker, which answers it by ids: the task's sources as its grant
    allows, its query built from the task (a queued resolve takes neither sources nor a query)."""

    request_id: str
    task_id: str
    goal_id: str


@event_type("ContextResolveAnswered")
@dataclass(frozen=True)
class ContextResolveAnswered(DomainEvent):
    """A queued resolve was answered by the resolve ``resolve_id`` (recorded on the task's context stream)."""

    request_id: str
    task_id: str
    resolve_id: str
    bundle_digest: str


@event_type("ContextResolveFailed")
@dataclass(frozen=True)
class ContextResolveFailed(DomainEvent):
    """A queued resolve was refused when its worker ran it (the error a synchronous resolve would answer)."""

    request_id: str
    task_id: str
    code: str
    message: str
    field: str | None = None
