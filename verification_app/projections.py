from __future__ import annotations

import uuid

from nexum.core.verification.approvals import (
    DENIED,
    GRANTED,
    PENDING,
    ApprovalDenied,
    ApprovalGranted,
    ApprovalRequested,
)
from nexum.core.verification.contracts import (
    CheckRunRecorded,
    CompletionRequested,
    ContractRegistered,
    GateDecided,
)
from nexum.eventstore.projections import Projection, ReadModelRows, handles
from nexum.eventstore.reading import StoredEvent
from verification_app.models import Approval, CheckRun, CompletionRequest, Contract


def check_run_id(request_id: str, name: str) -> uuid.UUID:
    """A check run's primary key: one per (request, check name)."""
    return uuid.uuid5(uuid.UUID(str(request_id)), name)


class VerificationProjection(Projection):
    """Contracts, completion requests with their decisions, check runs, and approvals."""

    models = (Contract, CompletionRequest, CheckRun, Approval)

    @handles(ContractRegistered)
    def contract_registered(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ContractRegistered = stored.event  # type: ignore[assignment]
        task_id = uuid.UUID(event.task_id)
        fields = {
            "project_id": uuid.UUID(str(stored.project_id)),
            "goal_id": uuid.UUID(event.goal_id),
            "revision": event.revision,
            "checks": list(event.contract.get("checks", [])),
            "require_checks": bool(event.contract.get("require_checks", True)),
            "on_failure": str(event.contract.get("on_failure", "failed")),
            "approval": event.contract.get("approval"),
            "trust_class": event.trust_class,
            "derived_from": list(event.derived_from),
            "reason": event.reason,
            "actor": str(stored.metadata.get("actor", "")),
            "registered_at": stored.recorded_at,
            "position": stored.position,
        }
        if rows.get(Contract, task_id) is None:
            rows.insert(Contract, task_id=task_id, **fields)
        else:
            rows.update(Contract, task_id, **fields)

    @handles(CompletionRequested)
    def completion_requested(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: CompletionRequested = stored.event  # type: ignore[assignment]
        rows.insert(
            CompletionRequest,
            id=uuid.UUID(event.request_id),
            project_id=uuid.UUID(str(stored.project_id)),
            task_id=uuid.UUID(event.task_id),
            goal_id=uuid.UUID(event.goal_id),
            task_version=event.task_version,
            attempt=event.attempt,
            contract_revision=event.contract_revision,
            answer_sha256=event.answer_sha256,
            answer_bytes=event.answer_bytes,
            actor=str(stored.metadata.get("actor", "")),
            requested_at=stored.recorded_at,
            decided=False,
            outcome="",
            reason="",
            failing_checks=[],
            decided_at=None,
            position=stored.position,
            version=stored.version,
        )

    @handles(CheckRunRecorded)
    def check_run_recorded(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: CheckRunRecorded = stored.event  # type: ignore[assignment]
        rows.insert(
            CheckRun,
            id=check_run_id(event.request_id, event.name),
            request_id=uuid.UUID(event.request_id),
            project_id=uuid.UUID(str(stored.project_id)),
            task_id=uuid.UUID(event.task_id),
            name=event.name,
            kind=event.kind,
            ordinal=event.ordinal,
            passed=event.passed,
            reason=event.reason,
            exit_code=event.exit_code,
            duration_ms=event.duration_ms,
            output_sha256=event.output_sha256,
            output_bytes=event.output_bytes,
            truncated=event.truncated,
            argv=list(event.argv),
            cwd=event.cwd,
            actor=str(stored.metadata.get("actor", "")),
            recorded_at=stored.recorded_at,
            position=stored.position,
        )
        rows.update(CompletionRequest, uuid.UUID(event.request_id), version=stored.version)

    @handles(GateDecided)
    def gate_decided(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: GateDecided = stored.event  # type: ignore[assignment]
        rows.update(
            CompletionRequest,
            uuid.UUID(event.request_id),
            decided=True,
            outcome=event.outcome,
            reason=event.reason,
            failing_checks=list(event.failing_checks),
            decided_at=stored.recorded_at,
            version=stored.version,
        )

    @handles(ApprovalRequested)
    def approval_requested(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ApprovalRequested = stored.event  # type: ignore[assignment]
        rows.insert(
            Approval,
            id=uuid.UUID(event.approval_id),
            project_id=uuid.UUID(str(stored.project_id)),
            task_id=uuid.UUID(event.task_id),
            goal_id=uuid.UUID(event.goal_id),
            action=event.action,
            arguments_digest=event.arguments_digest,
            attempt=event.attempt,
            stage=event.stage,
            reason=event.reason,
            state=PENDING,
            decision_reason="",
            requested_by=str(stored.metadata.get("actor", "")),
            decided_by="",
            requested_at=stored.recorded_at,
            decided_at=None,
            position=stored.position,
            version=stored.version,
        )

    @handles(ApprovalGranted)
    def approval_granted(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ApprovalGranted = stored.event  # type: ignore[assignment]
        self._decided(stored, rows, event.approval_id, GRANTED, event.reason)

    @handles(ApprovalDenied)
    def approval_denied(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ApprovalDenied = stored.event  # type: ignore[assignment]
        self._decided(stored, rows, event.approval_id, DENIED, event.reason)

    def _decided(
        self, stored: StoredEvent, rows: ReadModelRows, approval_id: str, state: str, reason: str
    ) -> None:
        rows.update(
            Approval,
            uuid.UUID(approval_id),
            state=state,
            decision_reason=reason,
            decided_by=str(stored.metadata.get("actor", "")),
            decided_at=stored.recorded_at,
            version=stored.version,
        )
