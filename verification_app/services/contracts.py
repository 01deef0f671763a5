"""Registering a task's verification contract (SPEC V1, V8): parsed and refused by the gate's rules, derived
only from content trusted enough to set the bar, preflighted against the project's sandbox policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_app.world.models import WorldItem
from nexum.core.errors import (
    NotFound,
    ValidationFailed,
    require_expected_version,
)
from nexum.core.ids import uuid_or_none
from nexum.core.trust import TrustClass, require_authority
from nexum.core.verification.contracts import (
    MAX_DERIVED_FROM,
    contract_origin_trust,
    contract_stream,
    decide_register_contract,
)
from nexum.core.verification.gate import ContractSpec, contract_from_dict, contract_to_dict
from nexum.eventstore import store
from tasks_app import selectors as task_selectors
from verification_app import runner
from verification_app.models import Contract


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
) -> Contract:
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
    current = Contract.objects.filter(task_id=task.id).first()
    revision = current.revision if current else 0
    with _field_prefix(field):
        parsed = contract if isinstance(contract, ContractSpec) else _parse_contract(contract, origin)
    if idempotency_key is not None and _replayed(stream_id, idempotency_key, parsed):
        return Contract.objects.get(task_id=task.id)
    require_expected_version(
        revision, expected_revision, "the contract", unit="revision", field="expected_revision"
    )
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
    preflight = runner.check_runner(str(task.project_id))
    for index, check in enumerate(parsed.checks):
        check.preflight(preflight, f"{field}.checks[{index}]")
    store.append(
        stream_id=stream_id,
        events=[event],
        expected_version=revision,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=str(task.project_id),
    )
    return Contract.objects.get(task_id=task.id)


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


def _parse_contract(contract: object, origin: TrustClass) -> ContractSpec:

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


def _replayed(stream_id: str, idempotency_key: str, contract: ContractSpec) -> bool:

    return store.replayed(
        stream_id,
        idempotency_key,
        same_request=lambda recorded: (
            [r.data.get("contract") for r in recorded] == [contract_to_dict(contract)]
        ),
        different=f"idempotency key {idempotency_key!r} was used for a different contract",
    )


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
