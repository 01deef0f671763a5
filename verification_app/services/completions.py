"""Asking for a task's completion (SPEC V2, V6): ``completion_request`` records ``CompletionRequested`` at the
task's current version (or answers ``skipped``) and hands the request to a worker; a repeat answers the
first request."""

from __future__ import annotations

from dataclasses import dataclass

from context_app.world.artifacts import default_store
from nexum.core.errors import (
    ConcurrencyError,
    IllegalTransition,
    require_expected_version,
)
from nexum.core.verification.approvals import (
    BEFORE_COMPLETE,
)
from nexum.core.verification.checks.base import CheckResult, CheckSpec
from nexum.core.verification.contracts import (
    CompletionPending,
    CompletionRequested,
    completion_request_id,
    completion_stream,
    validate_answer,
)
from nexum.core.verification.gate import ContractSpec, gate_task_completion
from nexum.eventstore import store
from nexum.eventstore.models import Event
from nexum.work.dispatch import send_on_commit
from tasks_app import selectors as task_selectors
from tasks_app.models import Task
from verification_app.models import CompletionRequest, Contract
from verification_app.services.approvals import approval_gate
from verification_app.tasks import COMPLETION


@dataclass(frozen=True)
class CompletionResult:
    """What a completion request produced: a recorded request (pending or decided), or ``skipped`` with no
    request when the task was not running (nothing recorded)."""

    task: Task
    request: CompletionRequest | None
    outcome: str
    reason: str


def completion_request(
    *,
    project_id: str,
    task_id: str,
    answer: str = "",
    actor: str,
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> CompletionResult:
    """Ask the gate to complete a task with the model's ``answer`` (recorded, never deciding: V6).

    Returns the decision when the checks ran in process (Celery eager), else the pending request to poll.
    A task whose completion needs an operator's approval is refused 409 until it is granted
    (``approval_gate``: the first refusal records the approval it asks for, and nothing else).
    """
    answer = validate_answer(answer)
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    if task.is_goal:
        raise IllegalTransition(
            "a goal's state is derived from its tasks; complete its tasks", field="task_id"
        )
    request_id = completion_request_id(str(task.id), task.version)
    replay = _request_replay(
        request_id, idempotency_key, project_id=str(task.project_id), task_id=str(task.id)
    )
    if replay is not None:
        return _result(replay)
    require_expected_version(task.version, expected_version, f"task {task.key}")
    if task.state != "running":
        decision = gate_task_completion(task.state, ContractSpec(), answer, never_run_checks)
        return CompletionResult(task=task, request=None, outcome=decision.outcome, reason=decision.reason)
    pending = CompletionRequest.objects.filter(id=request_id).first()
    if pending is not None:
        raise _pending(pending)
    approval_gate(task=task, stage=BEFORE_COMPLETE, attempt=task.attempt, actor=actor)
    stored_answer = default_store().put(answer.encode("utf-8"))
    contract = Contract.objects.filter(task_id=task.id).first()
    event = CompletionRequested(
        request_id=request_id,
        task_id=str(task.id),
        goal_id=str(task.goal_id),
        task_version=task.version,
        attempt=task.attempt,
        contract_revision=contract.revision if contract else 0,
        answer_sha256=stored_answer.sha256,
        answer_bytes=stored_answer.size,
    )
    try:
        store.append(
            stream_id=completion_stream(request_id),
            events=[event],
            expected_version=0,
            idempotency_key=idempotency_key,
            actor=actor,
            project_id=str(task.project_id),
        )
    except ConcurrencyError:
        # A concurrent request for this task version was recorded first: it alone is decided.
        raise _pending(CompletionRequest.objects.get(id=request_id)) from None

    # In process (Celery eager) the checks run now and the result is the decision; with a broker it is sent
    # once committed, and a broker that is down leaves it pending for the dispatcher (202 either way).
    send_on_commit(COMPLETION, request_id)
    return _result(CompletionRequest.objects.get(id=request_id))


def _request_replay(
    request_id: str, idempotency_key: str | None, *, project_id: str, task_id: str
) -> CompletionRequest | None:
    if idempotency_key is None:
        return None
    if store.replayed(completion_stream(request_id), idempotency_key):
        return CompletionRequest.objects.get(id=request_id)
    # The same key on another version of the task: a retry of an earlier request.
    event = (
        Event.objects.filter(
            event_type="CompletionRequested",
            idempotency_key=idempotency_key,
            project_id=project_id,
            data__task_id=task_id,
            stream_id__startswith="completion-",
        )
        .order_by("-position")
        .first()
    )
    return None if event is None else CompletionRequest.objects.filter(id=event.data["request_id"]).first()


def _pending(request: CompletionRequest) -> CompletionPending:
    return CompletionPending(
        f"a completion request for this task at version {request.task_version} is already recorded;"
        f" poll /api/v1/completions/{request.id}",
        field="task_id",
        details={"request_id": str(request.id)},
    )


def _result(request: CompletionRequest) -> CompletionResult:
    request.refresh_from_db()
    task = Task.objects.get(id=request.task_id)
    outcome = request.outcome if request.decided else "pending"
    return CompletionResult(task=task, request=request, outcome=outcome, reason=request.reason)


def never_run_checks(check: CheckSpec) -> CheckResult:
    """The ``run_check`` of a decision for a task that is not running: the gate skips such a task and never
    calls it."""
    raise AssertionError("no check runs for a task that is not running")
