"""Answering a completion request (SPEC V3-V7, the worker's side): every check run in the sandbox and
recorded under the request's lease, then the gate's decision and the task's transition in one transaction."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from django.db import transaction

from context_app.world.artifacts import default_store, stored_text
from nexum.adapters import metrics, telemetry
from nexum.core.errors import (
    ConcurrencyError,
    IllegalTransition,
    NotFound,
    ValidationFailed,
)
from nexum.core.text import MAX_REASON_CHARS
from nexum.core.verification.checks.base import RAISED, CheckResult, CheckSpec
from nexum.core.verification.checks.command import CommandCheck
from nexum.core.verification.contracts import (
    DECISION_KEY,
    CheckRunRecorded,
    GateDecided,
    check_run_key,
    completion_stream,
    contract_stream,
)
from nexum.core.verification.gate import (
    GATE_ACTOR,
    ContractSpec,
    GateDecision,
    contract_from_dict,
    gate_task_completion,
)
from nexum.eventstore import reading, store
from nexum.work.leases import INTERRUPTIONS, Lease
from tasks_app import selectors as task_selectors
from tasks_app.models import Task
from tasks_app.services.lifecycle import task_record_gate_decision
from verification_app import runner
from verification_app.models import CheckRun, CompletionRequest
from verification_app.services.completions import never_run_checks


def completion_run(*, request_id: str, lease: Lease | None = None) -> CompletionRequest:
    """Run the request's checks and record the gate's decision. Idempotent: safe to redeliver.

    ``lease`` is the worker's lease on the request (None in process): it is told about every check and
    fences every write, so a run whose lease was taken over writes nothing (``LeaseLost``). Traced as
    ``nexum.completion``, each check a ``nexum.check`` inside it."""
    request = CompletionRequest.objects.filter(id=request_id).first()
    if request is None:
        raise NotFound(f"no completion request {request_id}", field="request_id")
    if request.decided:
        return request
    with telemetry.span(
        "nexum.completion",
        project_id=str(request.project_id),
        task_id=str(request.task_id),
        completion_id=str(request.id),
    ) as traced:
        decided = _completion_run(request, lease)
        traced.set(outcome=decided.outcome or None)
        return decided


def _completion_run(request: CompletionRequest, lease: Lease | None) -> CompletionRequest:
    task = task_selectors.task_get_unscoped(task_id=request.task_id)
    answer = stored_text(request.answer_sha256)
    try:
        contract = _contract_at(str(request.task_id), request.contract_revision)
    except ValidationFailed as refused:
        return _decide(request, _unrunnable_contract(request, refused, answer), lease)
    if task.version != request.task_version:
        decision = GateDecision(
            outcome="skipped",
            reason=f"the task moved on (version {request.task_version} → {task.version}, now {task.state});"
            " no check was run",
            model_answer=answer,
        )
    elif task.state != "running":
        decision = gate_task_completion(task.state, contract, answer, never_run_checks)
    else:
        results = {
            check.name: _run_or_reuse(request, check, ordinal, lease)
            for ordinal, check in enumerate(contract.checks, start=1)
        }
        decision = gate_task_completion("running", contract, answer, lambda check: results[check.name])
    return _decide(request, decision, lease)


def _unrunnable_contract(request: CompletionRequest, refused: ValidationFailed, answer: str) -> GateDecision:
    """The gate's decision when the registered contract no longer passes today's rules (say, a pattern
    registered before checks moved to RE2): the task fails closed with the reason, so the request ends and an
    operator knows to register a new contract; no check is run."""
    return GateDecision(
        outcome="failed",
        reason=f"contract revision {request.contract_revision} can no longer be run ({refused}); an operator"
        " must register a new contract",
        model_answer=answer,
    )


def _contract_at(task_id: str, revision: int) -> ContractSpec:
    if revision == 0:
        return ContractSpec()
    for stored in reading.read_stream(contract_stream(task_id)):
        if stored.version == revision:
            return contract_from_dict(stored.event.contract)  # type: ignore[attr-defined]
    raise NotFound(f"contract revision {revision} of task {task_id} is not in the log", field="revision")


def _run_or_reuse(
    request: CompletionRequest, check: CheckSpec, ordinal: int, lease: Lease | None
) -> CheckResult:

    recorded = CheckRun.objects.filter(request_id=request.id, name=check.name).first()
    if recorded is not None:
        return _result_of_row(recorded)
    if lease is not None:
        lease.before_check(check.name)
    on_start = lease.on_check_start if lease is not None else None
    with telemetry.span(
        "nexum.check", project_id=str(request.project_id), check=check.name, check_kind=check.kind
    ) as traced:
        try:
            result = runner.check_runner(str(request.project_id), on_start=on_start)(check)
        except INTERRUPTIONS:  # a lost lease or a database outage is not the check's failure: the run stops
            raise
        except Exception as error:  # V4: a check that raises is a failed check, and it is recorded as such
            result = CheckResult(
                name=check.name, passed=False, reason=RAISED, output=f"{type(error).__name__}: {error}"
            )
        traced.set(outcome="passed" if result.passed else "failed", reason=result.reason)
    output = default_store().put(result.output.encode("utf-8"))
    event = CheckRunRecorded(
        request_id=str(request.id),
        task_id=str(request.task_id),
        name=check.name,
        kind=check.kind,
        ordinal=ordinal,
        passed=result.passed,
        reason=result.reason,
        exit_code=result.exit_code,
        duration_ms=result.duration_ms,
        output_sha256=output.sha256,
        output_bytes=output.size,
        truncated=result.truncated,
        argv=check.argv if isinstance(check, CommandCheck) else (),
        cwd=check.cwd if isinstance(check, CommandCheck) else "",
    )
    try:
        with transaction.atomic():
            if lease is not None:
                lease.fence()
            store.append(
                stream_id=completion_stream(str(request.id)),
                events=[event],
                expected_version=None,
                idempotency_key=check_run_key(check.name),
                actor=GATE_ACTOR,
                project_id=str(request.project_id),
            )
    except store.IdempotencyKeyReused:
        # A redelivered message ran the same check concurrently and recorded first: its run counts.
        return _result_of_row(CheckRun.objects.get(request_id=request.id, name=check.name))
    if not result.passed:
        metrics.check_failed(kind=check.kind, reason=result.reason)
    return result


def _result_of_row(row: CheckRun) -> CheckResult:
    return CheckResult(
        name=row.name,
        passed=row.passed,
        reason=row.reason,
        exit_code=row.exit_code,
        output=stored_text(row.output_sha256),
        truncated=row.truncated,
        duration_ms=row.duration_ms,
    )


def _decide(request: CompletionRequest, decision: GateDecision, lease: Lease | None) -> CompletionRequest:
    """Append ``GateDecided`` and move the task, in one transaction; if the task moved on, ``skipped``."""
    request_id = str(request.id)
    try:
        with transaction.atomic():
            if lease is not None:
                lease.fence()
            _append_decision(request, decision.outcome, decision.reason, decision.failing_checks)
            if decision.outcome != "skipped":
                task_record_gate_decision(
                    task_id=str(request.task_id),
                    outcome=decision.outcome,
                    decision_id=request_id,
                    expected_version=request.task_version,
                    actor=GATE_ACTOR,
                    reason=_short(decision.reason),
                    idempotency_key=f"gate:{request_id}",
                )
        metrics.completion_decided(outcome=decision.outcome)
    except store.IdempotencyKeyReused:
        request.refresh_from_db()  # decided by a concurrent delivery of the same request
        return request
    except (ConcurrencyError, IllegalTransition):
        task = Task.objects.get(id=request.task_id)
        reason = (
            f"the task moved on before the decision ({decision.outcome}) was recorded: version"
            f" {request.task_version} → {task.version}, now {task.state}"
        )
        with contextlib.suppress(store.IdempotencyKeyReused):
            with transaction.atomic():
                if lease is not None:  # a concurrent delivery decided first, or this run lost its lease
                    lease.fence()
                _append_decision(request, "skipped", reason, decision.failing_checks)
            metrics.completion_decided(outcome="skipped")
    request.refresh_from_db()
    return request


def _append_decision(request: CompletionRequest, outcome: str, reason: str, failing: Sequence[str]) -> None:
    store.append(
        stream_id=completion_stream(str(request.id)),
        events=[
            GateDecided(
                request_id=str(request.id),
                task_id=str(request.task_id),
                goal_id=str(request.goal_id),
                outcome=outcome,
                reason=reason,
                failing_checks=tuple(failing),
                task_version=request.task_version,
            )
        ],
        expected_version=None,
        idempotency_key=DECISION_KEY,
        actor=GATE_ACTOR,
        project_id=str(request.project_id),
    )


def _short(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 1] + "…"
