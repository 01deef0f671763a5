"""Reads of the verification gate, within one project (another project's ids are simply not found)."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet

from context_app.world.artifacts import stored_text
from nexum.core.errors import NotFound
from nexum.core.ids import uuid_or_none
from tasks_app import selectors as task_selectors
from verification_app.models import Approval, CheckRun, CompletionRequest, Contract


def contract_get(*, project_id: str | uuid.UUID, task_id: str | uuid.UUID) -> Contract | None:
    """The task's current contract, None when none is registered (``NotFound`` for another project's task)."""
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    return Contract.objects.filter(task_id=task.id).first()


def completion_get(*, project_id: str | uuid.UUID, request_id: str | uuid.UUID) -> CompletionRequest:
    pk = uuid_or_none(request_id)
    request = None if pk is None else CompletionRequest.objects.filter(project_id=project_id, id=pk).first()
    if request is None:
        raise NotFound(f"no completion request {request_id}", field="request_id")
    return request


def task_completions(*, project_id: str | uuid.UUID, task_id: str | uuid.UUID) -> QuerySet[CompletionRequest]:
    """A task's completion requests with their decisions, newest first."""
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    return CompletionRequest.objects.filter(task_id=task.id).order_by("-position")


def request_check_runs(*, request: CompletionRequest) -> QuerySet[CheckRun]:
    return CheckRun.objects.filter(request_id=request.id).order_by("ordinal")


def latest_check_runs(*, task_id: str | uuid.UUID) -> list[dict[str, Any]]:
    """The check runs of the task's latest completion request, in contract order (for the compile service).

    Each row: ``name``, ``kind``, ``passed``, ``reason``, ``exit_code``, ``output`` (text from the artifact
    store), ``truncated``, ``duration_ms``. Empty when the task has no request. Callers are internal and
    already hold a task of the right project.
    """
    latest = CompletionRequest.objects.filter(task_id=task_id).order_by("-position").first()
    if latest is None:
        return []
    return [
        {
            "name": run.name,
            "kind": run.kind,
            "passed": run.passed,
            "reason": run.reason,
            "exit_code": run.exit_code,
            "output": stored_text(run.output_sha256),
            "truncated": run.truncated,
            "duration_ms": run.duration_ms,
        }
        for run in request_check_runs(request=latest)
    ]


def approval_get(*, project_id: str | uuid.UUID, approval_id: str | uuid.UUID) -> Approval:
    pk = uuid_or_none(approval_id)
    approval = None if pk is None else Approval.objects.filter(project_id=project_id, id=pk).first()
    if approval is None:
        raise NotFound(f"no approval {approval_id}", field="approval_id")
    return approval


def approval_list(
    *, project_id: str | uuid.UUID, state: str | None = None, task_id: Any = None
) -> QuerySet[Approval]:
    """The project's approvals, newest first, by state and task."""
    approvals = Approval.objects.filter(project_id=project_id)
    if state is not None:
        approvals = approvals.filter(state=state)
    if task_id is not None:
        approvals = approvals.filter(task_id=task_id)
    return approvals.order_by("-position")
