"""The verification gate's rules (SPEC V1–V6): contracts, the completion decision, and their recorded form.

A deterministic check, never the model's claim, is the only way a task moves from ``running`` to
``completed``. This module decides; it runs nothing itself. The caller hands ``gate_task_completion`` a
``run_check`` callable (a ``CheckRunner`` of ``nexum/adapters/sandbox/`` in production, a fake in tests) and
the gate calls it once per registered check. The check kinds themselves are ``nexum/core/verification/
checks/``, one module each.

Contracts are frozen dataclasses validated on construction; every problem raises ``ValidationFailed`` with
the field at fault. ``contract_to_dict``/``contract_from_dict`` turn them into plain JSON-able dicts (event
data) and back, with the same validation; errors found inside a contract name the field as
``checks[<index>].<field>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, TypeAlias

from nexum.core.errors import ValidationFailed
from nexum.core.verification.approvals import validate_contract_approval
from nexum.core.verification.checks.base import (
    RAISED,
    CheckResult,
    CheckSpec,
    require_bool,
)
from nexum.core.verification.checks.registry import check_from_dict, check_to_dict

MAX_CHECKS: Final = 100

# --- outcomes ---

GATED_STATE: Final = "running"
GATE_ACTOR: Final = "gate"
"""Who the gate's own writes (its decisions, the transitions they make) are recorded as."""
Outcome: TypeAlias = Literal["completed", "failed", "blocked", "skipped"]
OnFailure: TypeAlias = Literal["failed", "blocked"]
ON_FAILURE_CHOICES: Final = ("failed", "blocked")
NO_CHECKS_REASON: Final = "no checks registered"


# --- contract ---


@dataclass(frozen=True)
class ContractSpec:
    """The checks a task must pass to complete (SPEC V1, V3, V5).

    ``require_checks`` False lets a contract without checks complete; ``on_failure`` is the outcome when a
    check fails: ``failed`` (retryable) or ``blocked``. Check names are unique within a contract.
    ``approval`` (``nexum.core.verification.approvals``): ``before_start`` or ``before_complete`` holds that
    command until an operator approves it, ``none`` opts out of the project's default for high-risk tasks,
    absent follows that default.
    """

    checks: tuple[CheckSpec, ...] = ()
    require_checks: bool = True
    on_failure: OnFailure = "failed"
    approval: str | None = None

    def __post_init__(self) -> None:
        checks = self.checks
        if isinstance(checks, str | bytes | Mapping) or not isinstance(checks, Iterable):
            raise ValidationFailed("checks must be a list of checks", field="checks")
        checks = tuple(checks)
        if len(checks) > MAX_CHECKS:
            raise ValidationFailed(f"a contract holds at most {MAX_CHECKS} checks", field="checks")
        seen: set[str] = set()
        for index, check in enumerate(checks):
            if not isinstance(check, CheckSpec):
                raise ValidationFailed(
                    f"checks[{index}] is not a check spec ({type(check).__name__})", field=f"checks[{index}]"
                )
            if check.name in seen:
                raise ValidationFailed(
                    f"duplicate check name {check.name!r}",
                    field=f"checks[{index}].name",
                    details={"name": check.name},
                )
            seen.add(check.name)
        object.__setattr__(self, "checks", checks)
        require_bool(self.require_checks, "require_checks")
        if self.on_failure not in ON_FAILURE_CHOICES:
            raise ValidationFailed(
                f"on_failure must be one of {', '.join(ON_FAILURE_CHOICES)}, got {self.on_failure!r}",
                field="on_failure",
            )
        validate_contract_approval(self.approval)


# --- results and the decision ---


@dataclass(frozen=True)
class GateDecision:
    """What the gate decided. ``model_answer`` is recorded for the record only (SPEC V6)."""

    outcome: Outcome
    reason: str
    results: tuple[CheckResult, ...] = ()
    model_answer: str = ""
    failing_checks: tuple[str, ...] = ()


def _result_of(check: CheckSpec, run_check: Callable[[CheckSpec], CheckResult]) -> CheckResult:
    """Run one check; anything that goes wrong counts as that check failing (SPEC V4)."""
    try:
        result = run_check(check)
    except Exception as exc:  # any error of the runner is a failed check, by rule V4
        message = str(exc) or type(exc).__name__
        return CheckResult(
            name=check.name, passed=False, reason=RAISED, output=f"{type(exc).__name__}: {message}"
        )
    if not isinstance(result, CheckResult):
        return CheckResult(
            name=check.name,
            passed=False,
            reason=RAISED,
            output=f"the check runner returned {type(result).__name__}, not a CheckResult",
        )
    if result.name != check.name:
        result = replace(result, name=check.name)
    return result


def gate_task_completion(
    task_state: str,
    contract: ContractSpec,
    model_answer: str,
    run_check: Callable[[CheckSpec], CheckResult],
) -> GateDecision:
    """Decide whether a task in ``task_state`` may complete under ``contract`` (SPEC V2–V6).

    - Only a ``running`` task is gated: any other state is ``skipped`` and ``run_check`` is never called.
    - No checks: ``failed`` with reason "no checks registered", unless ``require_checks`` is false
      (then ``completed``).
    - Every check runs, in contract order, even after one failed, so the reason names every failing check.
      A ``run_check`` that raises (or returns something that is not a CheckResult) fails that check with
      reason ``raised``.
    - All passed: ``completed``; otherwise the contract's ``on_failure`` (``failed`` or ``blocked``).
    - ``model_answer`` is recorded and never consulted.
    """
    if not isinstance(contract, ContractSpec):
        raise TypeError(f"contract must be a ContractSpec, not {type(contract).__name__}")
    if task_state != GATED_STATE:
        return GateDecision(
            outcome="skipped",
            reason=f"task is {task_state!r}, not {GATED_STATE!r}; no check was run",
            model_answer=model_answer,
        )
    if not contract.checks:
        if contract.require_checks:
            return GateDecision(outcome="failed", reason=NO_CHECKS_REASON, model_answer=model_answer)
        return GateDecision(
            outcome="completed", reason="no checks registered and none required", model_answer=model_answer
        )

    results = tuple(_result_of(check, run_check) for check in contract.checks)
    failing = tuple(result for result in results if not result.passed)
    if not failing:
        noun = "check" if len(results) == 1 else "checks"
        return GateDecision(
            outcome="completed",
            reason=f"all {len(results)} {noun} passed",
            results=results,
            model_answer=model_answer,
        )
    listed = ", ".join(f"{result.name} ({result.reason})" for result in failing)
    return GateDecision(
        outcome=contract.on_failure,
        reason=f"{len(failing)} of {len(results)} checks failed: {listed}",
        results=results,
        model_answer=model_answer,
        failing_checks=tuple(result.name for result in failing),
    )


# --- serialization ---


def contract_to_dict(contract: ContractSpec) -> dict[str, Any]:
    """The contract as recorded; ``approval`` only when it is set, so a contract without one is recorded as
    it was before approvals existed."""
    recorded: dict[str, Any] = {
        "checks": [check_to_dict(check) for check in contract.checks],
        "require_checks": contract.require_checks,
        "on_failure": contract.on_failure,
    }
    if contract.approval is not None:
        recorded["approval"] = contract.approval
    return recorded


def contract_from_dict(data: object) -> ContractSpec:
    """Build a contract from a plain dict; errors inside a check name ``checks[<index>].<field>``."""
    if not isinstance(data, Mapping):
        raise ValidationFailed(f"a contract must be an object, not {type(data).__name__}", field="contract")
    unexpected = sorted(
        str(key) for key in data if key not in {"checks", "require_checks", "on_failure", "approval"}
    )
    if unexpected:
        raise ValidationFailed(
            f"unexpected member(s) in contract: {', '.join(unexpected)}", field=unexpected[0]
        )
    raw_checks = data.get("checks", [])
    if not isinstance(raw_checks, list | tuple):
        raise ValidationFailed("checks must be a list", field="checks")
    if len(raw_checks) > MAX_CHECKS:
        raise ValidationFailed(f"a contract holds at most {MAX_CHECKS} checks", field="checks")
    checks = []
    for index, raw in enumerate(raw_checks):
        try:
            checks.append(check_from_dict(raw))
        except ValidationFailed as exc:
            prefix = f"checks[{index}]"
            field_name = f"{prefix}.{exc.field}" if exc.field and exc.field != "check" else prefix
            raise ValidationFailed(f"{prefix}: {exc.message}", field=field_name, details=exc.details) from exc
    return ContractSpec(
        checks=tuple(checks),
        require_checks=data.get("require_checks", True),
        on_failure=data.get("on_failure", "failed"),
        approval=data.get("approval"),
    )


def result_to_dict(result: CheckResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "passed": result.passed,
        "reason": result.reason,
        "exit_code": result.exit_code,
        "output": result.output,
        "truncated": result.truncated,
        "duration_ms": result.duration_ms,
    }


def result_from_dict(data: Mapping[str, Any]) -> CheckResult:
    return CheckResult(
        name=data["name"],
        passed=data["passed"],
        reason=data["reason"],
        exit_code=data.get("exit_code"),
        output=data.get("output", ""),
        truncated=data.get("truncated", False),
        duration_ms=data.get("duration_ms", 0),
    )


def decision_to_dict(decision: GateDecision) -> dict[str, Any]:
    return {
        "outcome": decision.outcome,
        "reason": decision.reason,
        "results": [result_to_dict(result) for result in decision.results],
        "model_answer": decision.model_answer,
        "failing_checks": list(decision.failing_checks),
    }


def decision_from_dict(data: Mapping[str, Any]) -> GateDecision:
    return GateDecision(
        outcome=data["outcome"],
        reason=data["reason"],
        results=tuple(result_from_dict(item) for item in data.get("results", [])),
        model_answer=data.get("model_answer", ""),
        failing_checks=tuple(data.get("failing_checks", [])),
    )
