"""The verification gate's rules (SPEC V1–V6): check specs, contracts, results and the completion decision.

A deterministic check, never the model's claim, is the only way a task moves from ``running`` to
``completed``. This module decides; it runs nothing itself. The caller hands ``gate_task_completion`` a
``run_check`` callable (the sandbox in ``nexum/adapters/sandbox.py`` in production, a fake in tests) and the
gate calls it once per registered check.

Check specs are frozen dataclasses validated on construction; every problem raises ``ValidationFailed`` with
the field at fault. ``check_to_dict``/``check_from_dict`` and ``contract_to_dict``/``contract_from_dict``
turn them into plain JSON-able dicts (event data) and back, with the same validation; errors found inside a
contract name the field as ``checks[<index>].<field>``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Final, Literal, TypeAlias

import re2

from nexum.core.errors import ValidationFailed
from nexum.core.verification.approvals import check_contract_approval

# --- limits ---

MAX_NAME_CHARS: Final = 200
MAX_CHECKS: Final = 100
MAX_ARGV_ITEMS: Final = 256
MAX_ARGV_CHARS: Final = 64 * 1024  # sum over all arguments
MAX_PATH_CHARS: Final = 4096
MAX_PATTERN_CHARS: Final = 4096
MAX_DIGEST_CHARS: Final = 200
MIN_TIMEOUT_S: Final = 0.1
MAX_TIMEOUT_S: Final = 3600.0
DEFAULT_TIMEOUT_S: Final = 300.0
MAX_OUTPUT_BYTES_LIMIT: Final = 16 * 1024 * 1024
DEFAULT_MAX_OUTPUT_BYTES: Final = 64 * 1024

# --- reason codes of a CheckResult ---

PASSED: Final = "passed"
EXIT_NONZERO: Final = "exit_nonzero"
TIMEOUT: Final = "timeout"
MISSING_EXECUTABLE: Final = "missing_executable"
DENIED_EXECUTABLE: Final = "denied_executable"
CRASHED: Final = "crashed"  # killed by a signal
RAISED: Final = "raised"  # the check (or the machinery running it) raised
WORKSPACE_VIOLATION: Final = "workspace_violation"
NO_MATCH: Final = "no_match"
MISSING_FILE: Final = "missing_file"
RETURNED_FALSE: Final = "returned_false"  # a registered Python callable returned False
SANDBOX_UNAVAILABLE: Final = "sandbox_unavailable"  # no sandbox could be set up: nothing ran

REASON_CODES: Final = frozenset(
    {
        PASSED,
        EXIT_NONZERO,
        TIMEOUT,
        MISSING_EXECUTABLE,
        DENIED_EXECUTABLE,
        CRASHED,
        RAISED,
        WORKSPACE_VIOLATION,
        NO_MATCH,
        MISSING_FILE,
        RETURNED_FALSE,
        SANDBOX_UNAVAILABLE,
    }
)

# --- outcomes ---

GATED_STATE: Final = "running"
Outcome: TypeAlias = Literal["completed", "failed", "blocked", "skipped"]
OnFailure: TypeAlias = Literal["failed", "blocked"]
ON_FAILURE_CHOICES: Final = ("failed", "blocked")
NO_CHECKS_REASON: Final = "no checks registered"

DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?", re.ASCII)


# --- field validators (each raises ValidationFailed naming the field) ---


def _require_str(value: object, field_name: str, *, max_chars: int, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise ValidationFailed(f"{field_name} must be a string, not {type(value).__name__}", field=field_name)
    if not allow_empty and not value.strip():
        raise ValidationFailed(f"{field_name} must not be empty", field=field_name)
    if len(value) > max_chars:
        raise ValidationFailed(f"{field_name} is longer than {max_chars} characters", field=field_name)
    if "\x00" in value:
        raise ValidationFailed(f"{field_name} must not contain NUL characters", field=field_name)
    return value


def _require_name(value: object) -> str:
    return _require_str(value, "name", max_chars=MAX_NAME_CHARS)


def _require_path(value: object, field_name: str = "path") -> str:
    return _require_str(value, field_name, max_chars=MAX_PATH_CHARS)


def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2, whose matching time is linear in the input: no pattern can make a check
    hang (``^(a+)+$`` included). RE2 has no backreferences and no lookaround; such a pattern is refused."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        said = exc.args[0] if exc.args else exc
        reason = said.decode("utf-8", "replace") if isinstance(said, bytes) else said
        raise ValidationFailed(
            f"pattern is not a regular expression RE2 accepts ({reason}); backreferences and lookaround"
            " are not supported, the matching must stay linear in time",
            field="pattern",
        ) from None


def _require_pattern(value: object) -> str:
    pattern = _require_str(value, "pattern", max_chars=MAX_PATTERN_CHARS)
    compile_pattern(pattern)
    return pattern


def _require_argv(value: object) -> tuple[str, ...]:
    if isinstance(value, str | bytes):
        raise ValidationFailed(
            "argv must be a list of strings (one per argument, no shell), not a single string", field="argv"
        )
    if not isinstance(value, list | tuple):
        raise ValidationFailed(f"argv must be a list of strings, not {type(value).__name__}", field="argv")
    if not value:
        raise ValidationFailed("argv must name at least the executable", field="argv")
    if len(value) > MAX_ARGV_ITEMS:
        raise ValidationFailed(f"argv has more than {MAX_ARGV_ITEMS} items", field="argv")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ValidationFailed(
                f"argv[{index}] must be a string, not {type(item).__name__}", field=f"argv[{index}]"
            )
        if "\x00" in item:
            raise ValidationFailed(f"argv[{index}] must not contain NUL characters", field=f"argv[{index}]")
    if not value[0].strip():
        raise ValidationFailed("argv[0] (the executable) must not be empty", field="argv[0]")
    if sum(len(item) for item in value) > MAX_ARGV_CHARS:
        raise ValidationFailed(f"argv is longer than {MAX_ARGV_CHARS} characters in total", field="argv")
    return tuple(value)


def _require_number(value: object, field_name: str, *, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationFailed(f"{field_name} must be a number, not {type(value).__name__}", field=field_name)
    if not (low <= value <= high):  # also rejects NaN
        raise ValidationFailed(
            f"{field_name} must be between {low} and {high}, got {value}", field=field_name
        )
    return float(value)


def _require_int(value: object, field_name: str, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed(
            f"{field_name} must be an integer, not {type(value).__name__}", field=field_name
        )
    if not (low <= value <= high):
        raise ValidationFailed(
            f"{field_name} must be between {low} and {high}, got {value}", field=field_name
        )
    return value


def _require_bool(value: object, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed(
            f"{field_name} must be true or false, not {type(value).__name__}", field=field_name
        )
    return value


# --- check specs ---


@dataclass(frozen=True)
class CommandCheck:
    """Run ``argv`` (no shell) in ``cwd`` and require exit status 0.

    ``cwd`` is relative to the project's workspace folder (an absolute path is allowed only if it resolves
    inside it; the sandbox enforces that). ``timeout_s`` is wall-clock; ``max_output_bytes`` caps the
    captured, merged stdout+stderr (the sandbox policy may cap both further).
    """

    kind: ClassVar[str] = "command"

    name: str
    argv: tuple[str, ...]
    cwd: str = "."
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES

    def __post_init__(self) -> None:
        _require_name(self.name)
        object.__setattr__(self, "argv", _require_argv(self.argv))
        _require_path(self.cwd, "cwd")
        timeout = _require_number(self.timeout_s, "timeout_s", low=MIN_TIMEOUT_S, high=MAX_TIMEOUT_S)
        object.__setattr__(self, "timeout_s", timeout)
        _require_int(self.max_output_bytes, "max_output_bytes", low=1, high=MAX_OUTPUT_BYTES_LIMIT)


@dataclass(frozen=True)
class FileExistsCheck:
    """Require ``path`` (relative to the project's workspace folder) to exist."""

    kind: ClassVar[str] = "file_exists"

    name: str
    path: str

    def __post_init__(self) -> None:
        _require_name(self.name)
        _require_path(self.path)


@dataclass(frozen=True)
class FileMatchesCheck:
    """Require the file at ``path`` (relative to the project's workspace) to contain a match of ``pattern``.

    Matching is an RE2 search (linear time; see ``compile_pattern``) over the UTF-8 text (undecodable bytes
    replaced); use inline flags such as ``(?m)`` or ``(?i)`` in the pattern.
    """

    kind: ClassVar[str] = "file_matches"

    name: str
    path: str
    pattern: str

    def __post_init__(self) -> None:
        _require_name(self.name)
        _require_path(self.path)
        _require_pattern(self.pattern)


@dataclass(frozen=True)
class ArtifactMatchesCheck:
    """Require the content of the artifact with ``artifact_digest`` to contain a match of ``pattern`` (an RE2
    search, as for ``FileMatchesCheck``)."""

    kind: ClassVar[str] = "artifact_matches"

    name: str
    artifact_digest: str
    pattern: str

    def __post_init__(self) -> None:
        _require_name(self.name)
        digest = _require_str(self.artifact_digest, "artifact_digest", max_chars=MAX_DIGEST_CHARS)
        if any(ch.isspace() for ch in digest):
            raise ValidationFailed("artifact_digest must not contain whitespace", field="artifact_digest")
        _require_pattern(self.pattern)


@dataclass(frozen=True)
class CallableCheck:
    """A Python callable registered by a library user, named ``package.module:function`` (or dotted).

    The dotted path is only a stable name: the runner looks it up in a registry the operator built; it never
    imports whatever a contract names (SPEC V8).
    """

    kind: ClassVar[str] = "callable"

    name: str
    dotted_path: str

    def __post_init__(self) -> None:
        _require_name(self.name)
        path = _require_str(self.dotted_path, "dotted_path", max_chars=MAX_NAME_CHARS)
        if not DOTTED_PATH.fullmatch(path):
            raise ValidationFailed(
                "dotted_path must look like 'package.module:function' or 'package.module.function'",
                field="dotted_path",
            )


CheckSpec: TypeAlias = (
    CommandCheck | FileExistsCheck | FileMatchesCheck | ArtifactMatchesCheck | CallableCheck
)
CHECK_TYPES: Final[dict[str, type[CheckSpec]]] = {
    cls.kind: cls
    for cls in (CommandCheck, FileExistsCheck, FileMatchesCheck, ArtifactMatchesCheck, CallableCheck)
}


# --- contract ---


@dataclass(frozen=True)
class Contract:
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
            if not isinstance(check, tuple(CHECK_TYPES.values())):
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
        _require_bool(self.require_checks, "require_checks")
        if self.on_failure not in ON_FAILURE_CHOICES:
            raise ValidationFailed(
                f"on_failure must be one of {', '.join(ON_FAILURE_CHOICES)}, got {self.on_failure!r}",
                field="on_failure",
            )
        check_contract_approval(self.approval)


# --- results and the decision ---


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    ``passed`` is true exactly when ``reason`` is ``passed``. ``exit_code`` is the command's status (negative:
    killed by that signal number; None when nothing ran or the check is not a command). ``output`` is the
    captured output, or for a check that did not run or raised, a human explanation. ``truncated`` marks
    output cut at the size cap.
    """

    name: str
    passed: bool
    reason: str
    exit_code: int | None = None
    output: str = ""
    truncated: bool = False
    duration_ms: int = 0

    def __post_init__(self) -> None:
        if self.reason not in REASON_CODES:
            raise ValueError(f"unknown check reason {self.reason!r}")
        if self.passed != (self.reason == PASSED):
            raise ValueError(f"passed={self.passed} contradicts reason {self.reason!r}")


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
    contract: Contract,
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
    if not isinstance(contract, Contract):
        raise TypeError(f"contract must be a Contract, not {type(contract).__name__}")
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

CHECK_FIELDS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    # kind: (required fields, optional fields)
    "command": (("name", "argv"), ("cwd", "timeout_s", "max_output_bytes")),
    "file_exists": (("name", "path"), ()),
    "file_matches": (("name", "path", "pattern"), ()),
    "artifact_matches": (("name", "artifact_digest", "pattern"), ()),
    "callable": (("name", "dotted_path"), ()),
}


def check_to_dict(check: CheckSpec) -> dict[str, Any]:
    """A JSON-able dict with a ``kind`` member; ``check_from_dict`` reverses it."""
    data: dict[str, Any] = {"kind": check.kind}
    required, optional = CHECK_FIELDS[check.kind]
    for name in (*required, *optional):
        value = getattr(check, name)
        data[name] = list(value) if isinstance(value, tuple) else value
    return data


def check_from_dict(data: object) -> CheckSpec:
    """Build a check spec from a plain dict, refusing unknown kinds, missing and unexpected members."""
    if not isinstance(data, Mapping):
        raise ValidationFailed(f"a check must be an object, not {type(data).__name__}", field="check")
    kind = data.get("kind")
    if kind not in CHECK_TYPES:
        raise ValidationFailed(
            f"kind must be one of {', '.join(sorted(CHECK_TYPES))}, got {kind!r}", field="kind"
        )
    required, optional = CHECK_FIELDS[kind]
    for name in required:
        if name not in data:
            raise ValidationFailed(f"a {kind} check needs {name!r}", field=name)
    unexpected = sorted(str(key) for key in data if key not in {"kind", *required, *optional})
    if unexpected:
        raise ValidationFailed(
            f"unexpected member(s) for a {kind} check: {', '.join(unexpected)}", field=unexpected[0]
        )
    kwargs = {name: data[name] for name in (*required, *optional) if name in data}
    return CHECK_TYPES[kind](**kwargs)


def contract_to_dict(contract: Contract) -> dict[str, Any]:
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


def contract_from_dict(data: object) -> Contract:
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
    return Contract(
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
