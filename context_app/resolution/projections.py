"""The resolver's read models from the log: sources, grants, required questions, resolves, retrievals,
bundle items, escalations and the per-task context head the plan gate reads."""

from __future__ import annotations

import uuid
from typing import Any

from django.utils.dateparse import parse_datetime

from context_app.resolution.models import (
    BundleItem,
    Escalation,
    Grant,
    Resolve,
    ResolveRequest,
    Retrieval,
    Source,
    TaskContext,
    TaskQuestions,
)
from nexum.core.ids import BUNDLE_ITEM_ROW_IDS, as_uuid
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.events import (
    BundleResolved,
    ContextResolveAnswered,
    ContextResolveFailed,
    ContextResolveRequested,
    EscalationOpened,
    EscalationResolved,
    GrantIssued,
    GrantRevoked,
    PlanGateOverridden,
    RequiredQuestionsSet,
    RetrievalDenied,
    RetrievalPerformed,
    SourceRegistered,
)
from nexum.core.resolution.record import queued_resolve_id
from nexum.eventstore.projections import Projection, ReadModelRows, handles
from nexum.eventstore.reading import StoredEvent


def bundle_item_id(resolve_id: str, ordinal: int) -> uuid.UUID:
    return uuid.uuid5(BUNDLE_ITEM_ROW_IDS, f"{resolve_id}:{ordinal}")


def _queued_id(stored: StoredEvent, request_id: str) -> uuid.UUID:
    """A queued resolve's id: derived from its project and the caller's request id, as the service does."""
    return as_uuid(queued_resolve_id(project_id=str(stored.project_id), request_id=request_id))


def _actor(stored: StoredEvent) -> str:
    return str(stored.metadata.get("actor", ""))


class ResolutionProjection(Projection):
    models = (
        Source,
        Grant,
        TaskQuestions,
        TaskContext,
        Resolve,
        ResolveRequest,
        Retrieval,
        BundleItem,
        Escalation,
    )

    @handles(SourceRegistered)
    def source_registered(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.SourceRegistered = stored.event  # type: ignore[assignment]
        rows.insert(
            Source,
            id=as_uuid(event.source_id),
            project_id=as_uuid(stored.project_id),
            name=event.name,
            kind=event.kind,
            config=dict(event.config),
            declared_scopes=list(event.declared_scopes),
            highest_trust=event.highest_trust,
            ttl_seconds=event.ttl_seconds,
            track_revision=event.track_revision,
            writable_by=event.writable_by,
            actor=_actor(stored),
            registered_at=stored.recorded_at,
            version=stored.version,
        )

    @handles(GrantIssued)
    def grant_issued(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.GrantIssued = stored.event  # type: ignore[assignment]
        rows.insert(
            Grant,
            id=as_uuid(event.grant_id),
            project_id=as_uuid(stored.project_id),
            goal_id=as_uuid(event.goal_id),
            task_id=as_uuid(event.task_id) if event.task_id else None,
            scopes={name: list(scopes) for name, scopes in event.scopes.items()},
            expires_at=parse_datetime(event.expires_at) if event.expires_at else None,
            reason=event.reason,
            derived_from=list(event.derived_from),
            actor=_actor(stored),
            issued_at=stored.recorded_at,
            revoked_at=None,
            revoke_reason="",
            version=stored.version,
        )

    @handles(GrantRevoked)
    def grant_revoked(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.GrantRevoked = stored.event  # type: ignore[assignment]
        rows.update(
            Grant,
            as_uuid(event.grant_id),
            revoked_at=stored.recorded_at,
            revoke_reason=event.reason,
            version=stored.version,
        )

    @handles(RequiredQuestionsSet)
    def questions_set(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.RequiredQuestionsSet = stored.event  # type: ignore[assignment]
        fields = {
            "questions": [dict(q) for q in event.questions],
            "actor": _actor(stored),
            "updated_at": stored.recorded_at,
            "version": stored.version,
        }
        task_id = as_uuid(event.task_id)
        if rows.get(TaskQuestions, task_id) is None:
            rows.insert(
                TaskQuestions,
                task_id=task_id,
                project_id=as_uuid(stored.project_id),
                goal_id=as_uuid(event.goal_id),
                **fields,
            )
        else:
            rows.update(TaskQuestions, task_id, **fields)

    def _touch_context(self, stored: StoredEvent, rows: ReadModelRows, task_id: str, **fields: Any) -> None:
        """Every event of ``context-<task_id>`` moves the head's version."""
        pk = as_uuid(task_id)
        if rows.get(TaskContext, pk) is None:
            rows.insert(
                TaskContext,
                task_id=pk,
                project_id=as_uuid(stored.project_id),
                goal_id=as_uuid(fields.pop("goal_id")),
                version=stored.version,
                updated_at=stored.recorded_at,
                **fields,
            )
        else:
            fields.pop("goal_id", None)
            rows.update(TaskContext, pk, version=stored.version, updated_at=stored.recorded_at, **fields)

    def _retrieval(self, stored: StoredEvent, rows: ReadModelRows, **fields: Any) -> None:
        rows.insert(
            Retrieval,
            position=stored.position,
            project_id=as_uuid(stored.project_id),
            actor=_actor(stored),
            recorded_at=stored.recorded_at,
            **fields,
        )

    @handles(RetrievalPerformed)
    def retrieval_performed(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.RetrievalPerformed = stored.event  # type: ignore[assignment]
        self._retrieval(
            stored,
            rows,
            resolve_id=as_uuid(event.resolve_id),
            task_id=as_uuid(event.task_id),
            source=event.source,
            scopes=list(event.scopes),
            query=event.query,
            outcome=event.outcome,
            code=event.error_kind or "",
            reason=event.error or "",
            item_digests=list(event.item_digests),
        )
        self._touch_context(stored, rows, event.task_id, goal_id=event.goal_id)

    @handles(RetrievalDenied)
    def retrieval_denied(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.RetrievalDenied = stored.event  # type: ignore[assignment]
        self._retrieval(
            stored,
            rows,
            resolve_id=as_uuid(event.resolve_id),
            task_id=as_uuid(event.task_id),
            source=event.source,
            scopes=list(event.scopes),
            query=event.query,
            outcome="denied",
            code=event.code,
            reason=event.reason,
            item_digests=[],
        )
        self._touch_context(stored, rows, event.task_id, goal_id=event.goal_id)

    @handles(BundleResolved)
    def bundle_resolved(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.BundleResolved = stored.event  # type: ignore[assignment]
        resolve_id = as_uuid(event.resolve_id)
        rows.insert(
            Resolve,
            id=resolve_id,
            project_id=as_uuid(stored.project_id),
            task_id=as_uuid(event.task_id),
            goal_id=as_uuid(event.goal_id),
            bundle_digest=event.bundle_digest,
            complete=event.complete,
            stop_reason=event.stop_reason,
            risk=event.risk,
            item_count=len(event.items),
            left_out_count=event.left_out_count,
            denial_count=event.denial_count,
            source_error_count=event.source_error_count,
            tokens_used=event.tokens_used,
            escalation_ids=list(event.escalation_ids),
            actor=_actor(stored),
            position=stored.position,
            recorded_at=stored.recorded_at,
        )
        for ordinal, item in enumerate(event.items):
            rows.insert(
                BundleItem,
                id=bundle_item_id(event.resolve_id, ordinal),
                project_id=as_uuid(stored.project_id),
                resolve_id=resolve_id,
                task_id=as_uuid(event.task_id),
                bundle_digest=event.bundle_digest,
                ordinal=ordinal,
                digest=item["digest"],
                source=item["source"],
                locator=item["locator"],
                trust_class=item["trust_class"],
                stale=bool(item.get("stale")),
                conflict_group=item.get("conflict_group") or "",
                labels=list(item.get("labels") or []),
            )
        self._touch_context(
            stored,
            rows,
            event.task_id,
            goal_id=event.goal_id,
            latest_resolve_id=resolve_id,
            latest_bundle_digest=event.bundle_digest,
            complete=event.complete,
            stop_reason=event.stop_reason,
            resolved_at=stored.recorded_at,
        )

    @handles(EscalationOpened)
    def escalation_opened(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.EscalationOpened = stored.event  # type: ignore[assignment]
        rows.insert(
            Escalation,
            id=as_uuid(event.escalation_id),
            project_id=as_uuid(stored.project_id),
            task_id=as_uuid(event.task_id),
            goal_id=as_uuid(event.goal_id),
            resolve_id=as_uuid(event.resolve_id),
            bundle_digest=event.bundle_digest,
            key=event.key,
            kind=event.kind,
            missing=event.missing,
            why=event.why,
            subjects=list(event.subjects),
            sources=list(event.sources),
            conflict_group=event.conflict_group or "",
            evidence=[dict(e) for e in event.evidence],
            state=resolution_events.ESCALATION_OPEN,
            resolution="",
            resolution_detail={},
            resolution_reason="",
            resolved_by="",
            opened_at=stored.recorded_at,
            resolved_at=None,
            position=stored.position,
        )
        self._touch_context(stored, rows, event.task_id, goal_id=event.goal_id)

    @handles(EscalationResolved)
    def escalation_resolved(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.EscalationResolved = stored.event  # type: ignore[assignment]
        rows.update(
            Escalation,
            as_uuid(event.escalation_id),
            state=resolution_events.ESCALATION_RESOLVED,
            resolution=event.resolution,
            resolution_detail=dict(event.detail),
            resolution_reason=event.reason,
            resolved_by=_actor(stored),
            resolved_at=stored.recorded_at,
        )
        self._touch_context(stored, rows, event.task_id, goal_id=None)

    @handles(PlanGateOverridden)
    def plan_gate_overridden(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.PlanGateOverridden = stored.event  # type: ignore[assignment]
        self._touch_context(
            stored,
            rows,
            event.task_id,
            goal_id=None,
            override_resolve_id=as_uuid(event.resolve_id),
            override_reason=event.reason,
            override_actor=_actor(stored),
            overridden_at=stored.recorded_at,
        )

    @handles(ContextResolveRequested)
    def resolve_requested(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.ContextResolveRequested = stored.event  # type: ignore[assignment]
        rows.insert(
            ResolveRequest,
            id=_queued_id(stored, event.request_id),
            request_id=event.request_id,
            project_id=as_uuid(stored.project_id),
            task_id=as_uuid(event.task_id),
            goal_id=as_uuid(event.goal_id),
            status=resolution_events.REQUEST_QUEUED,
            resolve_id=None,
            bundle_digest="",
            error=None,
            actor=_actor(stored),
            requested_at=stored.recorded_at,
            finished_at=None,
            version=stored.version,
        )

    @handles(ContextResolveAnswered)
    def resolve_answered(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.ContextResolveAnswered = stored.event  # type: ignore[assignment]
        rows.update(
            ResolveRequest,
            _queued_id(stored, event.request_id),
            status=resolution_events.REQUEST_DONE,
            resolve_id=as_uuid(event.resolve_id),
            bundle_digest=event.bundle_digest,
            finished_at=stored.recorded_at,
            version=stored.version,
        )

    @handles(ContextResolveFailed)
    def resolve_failed(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: resolution_events.ContextResolveFailed = stored.event  # type: ignore[assignment]
        rows.update(
            ResolveRequest,
            _queued_id(stored, event.request_id),
            status=resolution_events.REQUEST_FAILED,
            error={"code": event.code, "message": event.message, "field": event.field},
            finished_at=stored.recorded_at,
            version=stored.version,
        )
