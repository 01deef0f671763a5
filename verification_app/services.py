"""Writes of the verification gate (SPEC V1–V8): contracts, completion requests, check runs, decisions.

Flow of a completion:
1. ``completion_request`` (the API's ``POST /tasks/{id}/complete``) records ``CompletionRequested`` at the
   task's current version, keeping the model's answer in the artifact store (it never decides: V6). A task
   that is not running gets ``skipped`` and nothing is written or run (V2). The request's id is derived from
   the task and that version, so of two concurrent requests exactly one is recorded; the other gets 409
   ``completion_pending`` naming the request to poll.
2. ``completion_run`` (a Celery task; in process right away when Celery is eager) runs the contract's checks
   in the sandbox. Each run is recorded (``CheckRunRecorded``, idempotency key ``check:<name>``); a
   redelivered message re-uses every recorded run and runs only the checks that have none. The request is
   sent to a worker once it is committed; if the broker is down it stays pending and the dispatcher sends it
   (``nexum.work.dispatch``). On a worker the run holds the request's lease (``nexum.work.leases``): the
   sandbox reports each check's process group to it, and every result is written only while the lease is
   still this run's.
3. The decision: ``GateDecided`` and the task's transition (``task_record_gate_decision`` at the version the
   request was recorded at) are appended in one transaction. If the task moved on meanwhile, the decision is
   ``skipped`` and the task is left alone. A redelivery after the decision changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction

from context_app.world.artifacts import default_store, stored_text
from context_app.world.models import WorldItem
from nexum.adapters import metrics, telemetry
from nexum.core.errors import (
    ConcurrencyError,
    IllegalTransition,
    NotFound,
    ValidationFailed,
    check_expected,
)
from nexum.core.ids import AGENT_APPROVAL_IDS, uuid_or_none
from nexum.core.tasks.lifecycle import ALLOWED_FROM, MAX_REASON_CHARS
from nexum.core.trust import TrustClass
from nexum.core.verification.approvals import (
    BEFORE_COMPLETE,
    BEFORE_START,
    DENY,
    GATE_ACTIONS,
    GRANT,
    PENDING,
    ApprovalDecided,
    ApprovalDeniedEvent,
    ApprovalGranted,
    ApprovalNotRequired,
    ApprovalPending,
    ApprovalRequested,
    ApprovalView,
    approval_stream,
    check_action,
    check_arguments_digest,
    check_decision_reason,
    decide_gate,
    gate_approval_id,
    required_stages,
)
from nexum.core.verification.contracts import (
    DECISION_KEY,
    MAX_DERIVED_FROM,
    CheckRunRecorded,
    CompletionPending,
    CompletionRequested,
    GateDecided,
    check_answer,
    check_run_key,
    completion_request_id,
    completion_stream,
    contract_origin_trust,
    contract_stream,
    decide_register_contract,
)
from nexum.core.verification.gate import (
    RAISED,
    CheckResult,
    CheckSpec,
    CommandCheck,
    Contract,
    GateDecision,
    contract_from_dict,
    gate_task_completion,
)
from nexum.eventstore import store
from nexum.eventstore.models import Event as EventRow
from nexum.work.dispatch import send_on_commit
from tasks_app import selectors as task_selectors
from tasks_app.models import Project, Task
from tasks_app.services.lifecycle import task_record_gate_decision
from verification_app import runner, selectors
from verification_app.models import Approval, CheckRun, CompletionRequest
from verification_app.models import Contract as ContractRow

if TYPE_CHECKING:
    from nexum.work.leases import Lease

logger = logging.getLogger(__name__)

GATE_ACTOR = "gate"


@dataclass(frozen=True)
class CompletionResult:
    """What a completion request produced: a recorded request (pending or decided), or ``skipped`` with no
    request when the task was not running (nothing recorded)."""

    task: Task
    request: CompletionRequest | None
    outcome: str
    reason: str


# --- contracts ------------------------------------------------------------------------------------------


def contract_register(
    *,
    project_id: str,
    task_id: str,
    contract: object,
    actor: str,
    trust_class: str | None = None,
    derived_from: Sequence[str] = (),
    reason: str = "",
    expected_revision: int | None = None,
    idempotency_key: str | None = None,
    field: str = "contract",
) -> ContractRow:
    """Register or replace a task's contract (SPEC V1, V8).

    Registering a contract is an operator's act (the API refuses an agent token before this runs): its
    origin is set here, at the operator's ceiling ``repository_authored``, never above (a declared
    ``trust_class`` above it is 403 ``forbidden``). A declared lower ``trust_class`` and the classes of
    ``derived_from`` (world items of the project the contract was derived from) lower it; the lowest decides,
    and below ``repository_authored`` → 422 ``untrusted_content`` (an ``agent_reported`` item included) and
    nothing is written. Checks are vetted against the project's sandbox policy now (working directory and
    files inside the project's workspace folder, executable on the allowlist → 422 otherwise) and again
    when they run. Errors inside the contract name ``<field>.checks[i].<member>``.
    """
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    origin = _origin_trust(project_id, trust_class, derived_from)
    stream_id = contract_stream(str(task.id))
    current = ContractRow.objects.filter(task_id=task.id).first()
    revision = current.revision if current else 0
    with _field_prefix(field):
        parsed = contract if isinstance(contract, Contract) else _parse_contract(contract, origin)
    if idempotency_key is not None and _replayed(stream_id, idempotency_key, parsed):
        return ContractRow.objects.get(task_id=task.id)
    check_expected(revision, expected_revision, "the contract", unit="revision", field="expected_revision")
    event = decide_register_contract(
        task_id=str(task.id),
        goal_id=str(task.goal_id),
        task_state=task.state,
        is_goal=task.is_goal,
        current_revision=revision,
        contract=parsed,
        origin_trust=origin,
        derived_from=tuple(derived_from),
        reason=reason,
    )
    for index, check in enumerate(parsed.checks):
        runner.refuse_unrunnable(check, f"{field}.checks[{index}]", project_id=str(task.project_id))
    store.append(
        stream_id=stream_id,
        events=[event],
        expected_version=revision,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=str(task.project_id),
    )
    return ContractRow.objects.get(task_id=task.id)


def contracts_register_for_goal(
    *,
    project_id: str,
    task_ids: Mapping[str, str],
    contracts: object,
    actor: str,
    origin: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> None:
    """The hook ``goal_create`` calls inside its transaction: ``contracts`` maps task keys to contracts."""
    if not isinstance(contracts, Mapping):
        raise ValidationFailed("contracts must map task keys to contracts", field="contracts")
    origin = dict(origin or {})
    unknown = sorted(set(origin) - {"trust_class", "derived_from"})
    if unknown:
        raise ValidationFailed(f"unknown member {unknown[0]!r} of contract_origin", field="contract_origin")
    for key, contract in contracts.items():
        if key not in task_ids:
            raise ValidationFailed(f"{key!r} is not a task key of this goal", field=f"contracts.{key}")
        contract_register(
            project_id=project_id,
            task_id=task_ids[key],
            contract=contract,
            actor=actor,
            trust_class=origin.get("trust_class"),
            derived_from=origin.get("derived_from", ()),
            idempotency_key=idempotency_key,
            field=f"contracts.{key}",
        )


def _parse_contract(contract: object, origin: TrustClass) -> Contract:
    from nexum.core.trust import require_authority

    require_authority(origin, "registering a verification contract")  # before looking at its content
    return contract_from_dict(contract)


def _origin_trust(project_id: str, trust_class: object, derived_from: object) -> TrustClass:
    if isinstance(derived_from, str) or not isinstance(derived_from, Sequence):
        raise ValidationFailed("derived_from must be a list of world item ids", field="derived_from")
    if len(derived_from) > MAX_DERIVED_FROM:
        raise ValidationFailed(f"derived_from has at most {MAX_DERIVED_FROM} items", field="derived_from")
    classes = []
    for index, item_id in enumerate(derived_from):
        pk = uuid_or_none(item_id)
        item = None if pk is None else WorldItem.objects.filter(project_id=project_id, id=pk).first()
        if item is None:
            raise NotFound(f"no world item {item_id}", field=f"derived_from[{index}]")
        classes.append(TrustClass.parse(item.trust_class))
    return contract_origin_trust(trust_class, classes)


def _replayed(stream_id: str, idempotency_key: str, contract: Contract) -> bool:
    from nexum.core.verification.gate import contract_to_dict

    recorded = store.appended_with_key(stream_id, idempotency_key)
    if not recorded:
        return False
    if [data.get("contract") for _, _, _, data in recorded] != [contract_to_dict(contract)]:
        raise store.IdempotencyKeyReused(
            f"idempotency key {idempotency_key!r} was used for a different contract", field="idempotency_key"
        )
    return True


class _field_prefix:
    """Prefix the ``field`` of a validation error raised inside the block (``contract.checks[0].argv``)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: object, traceback: object) -> bool:
        if isinstance(error, ValidationFailed):
            error.field = f"{self.prefix}.{error.field}" if error.field else self.prefix
        return False


# --- completion requests --------------------------------------------------------------------------------


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
    answer = check_answer(answer)
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
    check_expected(task.version, expected_version, f"task {task.key}")
    if task.state != "running":
        decision = gate_task_completion(task.state, Contract(), answer, _never_run)
        return CompletionResult(task=task, request=None, outcome=decision.outcome, reason=decision.reason)
    pending = CompletionRequest.objects.filter(id=request_id).first()
    if pending is not None:
        raise _pending(pending)
    approval_gate(task=task, stage=BEFORE_COMPLETE, attempt=task.attempt, actor=actor)
    stored_answer = default_store().put(answer.encode("utf-8"))
    contract = ContractRow.objects.filter(task_id=task.id).first()
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
    from verification_app.tasks import COMPLETION  # the task module imports this one

    # In process (Celery eager) the checks run now and the result is the decision; with a broker it is sent
    # once committed, and a broker that is down leaves it pending for the dispatcher (202 either way).
    send_on_commit(COMPLETION, request_id)
    return _result(CompletionRequest.objects.get(id=request_id))


def _request_replay(
    request_id: str, idempotency_key: str | None, *, project_id: str, task_id: str
) -> CompletionRequest | None:
    if idempotency_key is None:
        return None
    if store.appended_with_key(completion_stream(request_id), idempotency_key):
        return CompletionRequest.objects.get(id=request_id)
    # The same key on another version of the task: a retry of an earlier request.
    event = (
        EventRow.objects.filter(
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


def _never_run(check: CheckSpec) -> CheckResult:
    raise AssertionError("no check runs for a task that is not running")


# --- running the checks and deciding (the worker's side) ------------------------------------------------


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
        decision = gate_task_completion(task.state, contract, answer, _never_run)
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


def _contract_at(task_id: str, revision: int) -> Contract:
    if revision == 0:
        return Contract()
    for stored in store.read_stream(contract_stream(task_id)):
        if stored.version == revision:
            return contract_from_dict(stored.event.contract)  # type: ignore[attr-defined]
    raise NotFound(f"contract revision {revision} of task {task_id} is not in the log", field="revision")


def _run_or_reuse(
    request: CompletionRequest, check: CheckSpec, ordinal: int, lease: Lease | None
) -> CheckResult:
    from nexum.work.leases import INTERRUPTIONS

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


# --- approvals (issue 28 item 4) --------------------------------------------------------------------------

_STAGE_OF_ACTION = {action: stage for stage, action in GATE_ACTIONS.items()}


def approval_stages(*, task: Task) -> set[str]:
    """The stages at which ``task`` waits for an operator: its contract's ``approval``, else the project's
    default when the task's risk is high."""
    contract_approval = ContractRow.objects.filter(task_id=task.id).values_list("approval", flat=True).first()
    default = Project.objects.filter(id=task.project_id).values_list("high_risk_approval", flat=True).first()
    return required_stages(contract_approval=contract_approval, risk=task.risk, high_risk_default=default)


def approval_gate(*, task: Task, stage: str, attempt: int, actor: str) -> None:
    """Let ``task``'s gated command (the ``stage``: before its start or its completion, for ``attempt``)
    through only once an operator granted it. The first time it arrives, Nexum asks for the approval
    itself (``ApprovalRequested``, committed) and refuses 409 ``approval_required`` naming it; while it is
    pending, the same; denied, 409 ``approval_denied`` with the operator's reason, until the agent requests
    a new approval of the action and an operator grants it."""
    if stage not in approval_stages(task=task):
        return
    action = GATE_ACTIONS[stage]
    latest = _latest_approval(task_id=str(task.id), action=action, attempt=attempt, arguments_digest="")
    if latest is None:
        latest = _gate_approval_ask(task=task, stage=stage, attempt=attempt, actor=actor)
    decide_gate(
        action=action,
        task_key=task.key,
        latest=ApprovalView(str(latest.id), latest.state, latest.decision_reason),
    )


def _latest_approval(*, task_id: str, action: str, attempt: int, arguments_digest: str) -> Approval | None:
    return (
        Approval.objects.filter(
            task_id=task_id, action=action, attempt=attempt, arguments_digest=arguments_digest
        )
        .order_by("-position")
        .first()
    )


def _gate_approval_ask(*, task: Task, stage: str, attempt: int, actor: str) -> Approval:
    action = GATE_ACTIONS[stage]
    approval_id = gate_approval_id(str(task.id), action, attempt)
    with contextlib.suppress(ConcurrencyError):  # a concurrent command asked first: the same approval
        store.append(
            stream_id=approval_stream(approval_id),
            events=[
                ApprovalRequested(
                    approval_id=approval_id,
                    task_id=str(task.id),
                    goal_id=str(task.goal_id),
                    action=action,
                    arguments_digest="",
                    attempt=attempt,
                    stage=stage,
                    reason=f"task {task.key!r} needs an operator's approval {stage.replace('_', ' ')}",
                )
            ],
            expected_version=0,
            actor=actor,
            project_id=str(task.project_id),
        )
    return Approval.objects.get(id=approval_id)


def approval_request(
    *,
    project_id: str,
    task_id: str,
    action: object,
    reason: object,
    actor: str,
    arguments_digest: object = "",
    idempotency_key: str | None = None,
) -> Approval:
    """An agent asks an operator to approve ``action`` on the task's current attempt: one of its own
    actions (``arguments_digest``: the sha256 of its arguments), or ``start`` / ``complete`` of a task that
    waits at that stage (again, after a denial; ``start`` is for the attempt the start would begin, so only
    of a pending or failed task, ``complete`` only of a running one: 409 ``illegal_transition`` otherwise).
    While an approval of the same action, attempt and arguments is pending, 409 ``approval_pending`` names
    it."""
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    if task.is_goal:
        raise IllegalTransition("approvals are for a goal's tasks, not the goal", field="task_id")
    action = check_action(action)
    digest = check_arguments_digest(arguments_digest)
    why = check_decision_reason(reason)
    stage = _STAGE_OF_ACTION.get(action, "")
    if stage:
        if digest:
            raise ValidationFailed(f"the gate's {action} takes no arguments_digest", field="arguments_digest")
        if task.state not in ALLOWED_FROM["gate" if stage == BEFORE_COMPLETE else "start"]:
            raise IllegalTransition(
                f"task {task.key!r} is {task.state}: its {action} cannot be approved now",
                field="action",
                details={"state": task.state},
            )
        if stage not in approval_stages(task=task):
            raise ApprovalNotRequired(
                f"task {task.key!r} does not wait for an approval {stage.replace('_', ' ')}", field="action"
            )
    attempt = task.attempt + 1 if action == GATE_ACTIONS[BEFORE_START] else task.attempt
    if idempotency_key is not None:
        approval_id = str(uuid.uuid5(AGENT_APPROVAL_IDS, f"{task.id}:{idempotency_key}"))
    else:
        approval_id = str(uuid.uuid4())
    replay = idempotency_key is not None and Approval.objects.filter(id=approval_id).exists()
    if not replay:
        latest = _latest_approval(
            task_id=str(task.id), action=action, attempt=attempt, arguments_digest=digest
        )
        if latest is not None and latest.state == PENDING:
            raise ApprovalPending(
                f"approval {latest.id} of {action} is already pending; wait for the operator's answer",
                field="action",
                details={"approval_id": str(latest.id)},
            )
    store.append(
        stream_id=approval_stream(approval_id),
        events=[
            ApprovalRequested(
                approval_id=approval_id,
                task_id=str(task.id),
                goal_id=str(task.goal_id),
                action=action,
                arguments_digest=digest,
                attempt=attempt,
                stage=stage,
                reason=why,
            )
        ],
        expected_version=0,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=str(task.project_id),
    )
    return Approval.objects.get(id=approval_id)


def approval_decide(
    *, project_id: str, approval_id: str, decision: object, reason: object, actor: str
) -> Approval:
    """An operator grants or denies a pending approval, with a reason (an event). Whether the caller may is
    the caller's check: the API refuses an agent token (403), the UI is for staff. A decided approval is
    409 ``approval_decided``."""
    approval = selectors.approval_get(project_id=project_id, approval_id=approval_id)
    if decision not in (GRANT, DENY):
        raise ValidationFailed(f"decision must be {GRANT} or {DENY}", field="decision")
    why = check_decision_reason(reason)
    if approval.state != PENDING:
        raise ApprovalDecided(
            f"approval {approval.id} is already {approval.state}",
            field="approval_id",
            details={"state": approval.state},
        )
    event_class = ApprovalGranted if decision == GRANT else ApprovalDeniedEvent
    try:
        store.append(
            stream_id=approval_stream(str(approval.id)),
            events=[event_class(approval_id=str(approval.id), task_id=str(approval.task_id), reason=why)],
            expected_version=approval.version,
            actor=actor,
            project_id=str(approval.project_id),
        )
    except ConcurrencyError:
        approval.refresh_from_db()
        raise ApprovalDecided(
            f"approval {approval.id} was decided meanwhile: {approval.state}",
            field="approval_id",
            details={"state": approval.state},
        ) from None
    approval.refresh_from_db()
    return approval


def _short(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 1] + "…"
