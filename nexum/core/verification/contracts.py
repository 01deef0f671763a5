"""The verification gate's events and the pure rules around them (SPEC V1–V8).

``nexum/core/verification/gate.py`` holds the gate itself (check specs, contracts, ``gate_task_completion``);
this module holds what the verification app records and the decisions it makes before and after running
checks.

Streams:
- ``contract-<task_id>``: ``ContractRegistered`` events; the stream version is the contract's revision.
- ``completion-<request_id>``: one completion request (``CompletionRequested``), then one
  ``CheckRunRecorded`` per check (idempotency key ``check:<name>``), then exactly one ``GateDecided``
  (idempotency key ``decision``).

Request ids are derived from the task and the task version the request was made at
(``completion_request_id``): two requests made against the same task version name the same stream, so of two
concurrent requests exactly one can create it (SPEC E2) and the other is refused with 409
``completion_pending``. A task version moves on with every transition, so a retried attempt gets a new id.

Events carry references, never content (SPEC R10): the model's answer and each check's output live in the
content-addressed artifact store; events hold their sha256 and size (and the output's truncation flag).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nexum.core.errors import Conflict, IllegalTransition, ValidationFailed
from nexum.core.events import DomainEvent, event_type
from nexum.core.ids import COMPLETION_REQUEST_IDS
from nexum.core.roles import OPERATOR, caller_trust
from nexum.core.trust import TrustClass, require_authority
from nexum.core.verification.gate import ContractSpec, contract_from_dict, contract_to_dict

MAX_ANSWER_CHARS: Final = 64 * 1024
MAX_DERIVED_FROM: Final = 100

# A contract can be first registered while the task is not final; once a task runs, its existing contract
# is frozen until the task leaves ``running`` (the agent being gated must not weaken its own gate).
CONTRACT_CHANGE_STATES: Final = frozenset({"pending", "failed", "blocked"})
CONTRACT_FIRST_STATES: Final = frozenset({"pending", "running", "failed", "blocked"})


def contract_stream(task_id: str) -> str:
    return f"contract-{task_id}"


def completion_stream(request_id: str) -> str:
    return f"completion-{request_id}"


def completion_request_id(task_id: str, task_version: int) -> str:
    """The id of the (only) completion request a task can have at ``task_version``."""
    return str(uuid.uuid5(COMPLETION_REQUEST_IDS, f"{task_id}:{task_version}"))


def check_run_key(name: str) -> str:
    """The idempotency key of a check's run within its request's stream."""
    return f"check:{name}"


DECISION_KEY: Final = "decision"


class ContractFrozen(Conflict):
    code = "contract_frozen"


class CompletionPending(Conflict):
    code = "completion_pending"


# --- events ---


@event_type("ContractRegistered")
@dataclass(frozen=True)
class ContractRegistered(DomainEvent):
    """A task's verification contract (a first registration or a replacement, ``revision`` 1, 2, …).

    ``contract`` is ``nexum.core.verification.gate.contract_to_dict`` of a validated contract. ``trust_class``
    is the lowest trust of what the contract derives from (never below ``repository_authored``: V8);
    ``derived_from`` names those world items.
    """

    task_id: str
    goal_id: str
    revision: int
    contract: dict[str, Any]
    trust_class: str
    derived_from: tuple[str, ...]
    reason: str


@event_type("CompletionRequested")
@dataclass(frozen=True)
class CompletionRequested(DomainEvent):
    """A caller asked for a running task to be completed. The answer is stored by digest, never decides."""

    request_id: str
    task_id: str
    goal_id: str
    task_version: int
    attempt: int
    contract_revision: int
    answer_sha256: str
    answer_bytes: int


@event_type("CheckRunRecorded")
@dataclass(frozen=True)
class CheckRunRecorded(DomainEvent):
    """One check's run for one request. ``output_sha256`` names the captured output in the artifact store."""

    request_id: str
    task_id: str
    name: str
    kind: str
    ordinal: int
    passed: bool
    reason: str
    exit_code: int | None
    duration_ms: int
    output_sha256: str
    output_bytes: int
    truncated: bool
    argv: tuple[str, ...]
    cwd: str


@event_type("GateDecided")
@dataclass(frozen=True)
class GateDecided(DomainEvent):
    """The gate's decision on one request: ``completed``, ``failed`` or ``blocked`` (the task moved with it,
    same transaction), or ``skipped`` (the task was not running at that version any more; nothing moved)."""

    request_id: str
    task_id: str
    goal_id: str
    outcome: str
    reason: str
    failing_checks: tuple[str, ...]
    task_version: int


# --- decisions ---


def contract_origin_trust(declared: object, derived: Iterable[TrustClass] = ()) -> TrustClass:
    """The origin a contract is recorded with. Registering a contract is an operator's act, so it starts at
    the operator's ceiling (``repository_authored``, ``nexum.core.roles``); a declared class may lower it
    (above the ceiling is 403), and so do the classes of the items the contract derives from."""
    if declared is not None and not isinstance(declared, str | TrustClass):
        raise ValidationFailed("trust_class must be a trust class name", field="trust_class")
    return min([caller_trust(declared, role=OPERATOR), *derived])


def decide_register_contract(
    *,
    task_id: str,
    goal_id: str,
    task_state: str,
    is_goal: bool,
    current_revision: int,
    contract: object,
    origin_trust: TrustClass,
    derived_from: Sequence[str] = (),
    reason: str = "",
) -> ContractRegistered:
    """Validate a contract registration against the task and the origin's trust (SPEC V1, V8).

    Untrusted origin → ``PolicyRefused`` (422 ``untrusted_content``) before anything else is looked at.
    A goal has no contract (its state is derived). A final task's contract cannot change. A running task's
    contract can be registered once but not replaced (``contract_frozen``).
    """
    require_authority(origin_trust, "registering a verification contract")
    parsed = contract if isinstance(contract, ContractSpec) else contract_from_dict(contract)
    if is_goal:
        raise ValidationFailed("a goal has no contract: register contracts on its tasks", field="task_id")
    allowed = CONTRACT_CHANGE_STATES if current_revision else CONTRACT_FIRST_STATES
    if task_state not in allowed:
        if current_revision and task_state == "running":
            raise ContractFrozen(
                "the task is running: its contract cannot be replaced until it fails or is blocked",
                field="contract",
                details={"state": task_state, "revision": current_revision},
            )
        raise IllegalTransition(
            f"a {task_state} task's contract cannot change", field="task_id", details={"state": task_state}
        )
    if not isinstance(reason, str) or len(reason) > 2000:
        raise ValidationFailed("reason must be a string of at most 2000 characters", field="reason")
    return ContractRegistered(
        task_id=task_id,
        goal_id=goal_id,
        revision=current_revision + 1,
        contract=contract_to_dict(parsed),
        trust_class=origin_trust.name,
        derived_from=tuple(derived_from),
        reason=reason,
    )


def contract_of(registered: Mapping[str, Any] | None) -> ContractSpec:
    """The contract recorded in an event's data; no registration means the empty contract (V3 refuses)."""
    return ContractSpec() if registered is None else contract_from_dict(registered)


def validate_answer(answer: object) -> str:
    if not isinstance(answer, str):
        raise ValidationFailed("answer must be a string", field="answer")
    if len(answer) > MAX_ANSWER_CHARS:
        raise ValidationFailed(f"answer has at most {MAX_ANSWER_CHARS} characters", field="answer")
    return answer
