"""What every check kind shares: the spec's base class, the result of running one, the reasons a result can
give, the validators its fields use, and the two ports through which a check reaches the world.

A check kind is a frozen dataclass subclassing ``CheckSpec`` in a module of its own in this package,
registered with ``@check_kind("<kind>")`` (``registry.py``). It carries everything about the kind: its fields
(required ones have no default), the JSON schema of each (``member(...)``'s metadata), their validation
(``__post_init__``), what it must settle before a contract holding it is stored (``preflight``) and how it
runs (``evaluate``, or ``run`` for a kind that reports a whole result). It reaches files, processes, artifacts
and registered callables only through ``CheckContext`` (the sandbox in production, a fake in tests), so the
core stays free of I/O.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol

import re2

from nexum.core.errors import PolicyRefused, ValidationFailed
from nexum.core.text import NOT_BLANK

# --- limits ---

MAX_NAME_CHARS: Final = 200
MAX_PATH_CHARS: Final = 4096
MAX_PATTERN_CHARS: Final = 4096

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

TEXT_SCHEMA: Final[Mapping[str, Any]] = {"type": "string", "pattern": NOT_BLANK}
"""A text member that may not be blank, as JSON Schema says it."""


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


class CheckRefused(Exception):
    """What the context raises when it refuses what a check asked of it (a path outside the workspace, a
    missing file, an executable off the allowlist): the check fails with ``reason``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class WorkspaceViolation(PolicyRefused):
    """At registration: a check's path or working directory leaves the project's workspace folder."""

    code = "workspace_violation"


class DeniedExecutable(PolicyRefused):
    """At registration: a command's executable is not on the operator's allowlist."""

    code = "denied_executable"


class CheckContext(Protocol):
    """Where a check runs: the project's workspace, its artifacts and the callables registered for it.
    Each method raises ``CheckRefused`` for what the operator's policy does not allow."""

    def run_command(self, check: Any) -> CheckResult:
        """Run a command check in the sandbox and report all of it (output, exit, duration)."""

    def require_workspace_file(self, path: str) -> None:
        """That ``path`` exists beneath the workspace (``CheckRefused`` with ``missing_file`` otherwise)."""

    def read_workspace_file(self, path: str) -> bytes | None:
        """The first bytes (at most the policy's read limit) of the regular file at ``path`` beneath the
        workspace; ``None`` when it is not a regular file."""

    def load_artifact(self, digest: str) -> bytes | None:
        """The first bytes of the project's artifact with this content digest; ``None``: there is none."""

    def registered_callable(self, dotted_path: str) -> Callable[[], object] | None:
        """The function registered under ``dotted_path``; ``None``: nothing is."""


class PreflightContext(Protocol):
    """What registration may ask of the project's sandbox policy before a contract is stored."""

    workspace_root: str

    def resolve_in_workspace(self, relative: str) -> str:
        """The real path of ``relative`` beneath the workspace (``CheckRefused`` when it leaves it)."""

    def resolve_executable(self, program: str, *, cwd: str) -> str:
        """The allowed executable ``program`` names (``CheckRefused``: denied or missing)."""


def member(*, default: Any = dataclasses.MISSING, **schema: Any) -> Any:
    """A check's field with the JSON schema of its member in a contract (``schema``); without ``default``
    the member is required."""
    return field(default=default, metadata={"schema": schema})


@dataclass(frozen=True)
class CheckSpec:
    """A check a contract holds. Subclasses are the check kinds (see the module docstring)."""

    kind: ClassVar[str] = ""

    name: str = member(**TEXT_SCHEMA, maxLength=MAX_NAME_CHARS, description="unique within the contract")

    def __post_init__(self) -> None:
        require_str(self.name, "name", max_chars=MAX_NAME_CHARS)

    @classmethod
    def members(cls) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The kind's required and optional members, in the order a contract records them."""
        fields = dataclasses.fields(cls)
        required = tuple(f.name for f in fields if f.default is dataclasses.MISSING)
        optional = tuple(f.name for f in fields if f.default is not dataclasses.MISSING)
        return required, optional

    @classmethod
    def member_schemas(cls) -> dict[str, dict[str, Any]]:
        """Each member's JSON schema, by name, in ``members`` order."""
        schemas = {f.name: dict(f.metadata["schema"]) for f in dataclasses.fields(cls)}
        return {name: schemas[name] for group in cls.members() for name in group}

    def preflight(self, context: PreflightContext, field_name: str) -> None:
        """Refuse, before a contract holding this check is stored, what can never run (``field_name``: where
        the check sits in the request). Checked again when the check runs; most kinds have nothing to do."""

    def run(self, context: CheckContext) -> CheckResult:
        """Run the check: ``evaluate``, timed; a refusal fails it with its reason, anything it raises with
        ``raised`` (SPEC V4)."""
        started = time.monotonic()
        try:
            reason, message = self.evaluate(context)
        except CheckRefused as refusal:
            reason, message = refusal.reason, refusal.message
        except Exception as exc:  # a check that raises is a failed check (V4)
            reason, message = RAISED, f"{type(exc).__name__}: {exc}"
        return CheckResult(
            name=self.name,
            passed=reason == PASSED,
            reason=reason,
            output=message,
            duration_ms=int((time.monotonic() - started) * 1000),
        )

    def evaluate(self, context: CheckContext) -> tuple[str, str]:
        """The check's reason code and a human message."""
        raise NotImplementedError(f"check kind {self.kind!r} does not say how it runs")


def workspace_member(check: CheckSpec, context: PreflightContext, member_name: str, field_name: str) -> str:
    """The real path of a check's ``member_name`` beneath the workspace; ``WorkspaceViolation`` naming
    ``<field_name>.<member_name>`` when it leaves it."""
    try:
        return context.resolve_in_workspace(getattr(check, member_name))
    except CheckRefused as refusal:
        if refusal.reason == WORKSPACE_VIOLATION:
            raise WorkspaceViolation(refusal.message, field=f"{field_name}.{member_name}") from None
        raise


# --- field validators (each raises ValidationFailed naming the field) ---


def require_str(value: object, field_name: str, *, max_chars: int, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise ValidationFailed(f"{field_name} must be a string, not {type(value).__name__}", field=field_name)
    if not allow_empty and not value.strip():
        raise ValidationFailed(f"{field_name} must not be empty", field=field_name)
    if len(value) > max_chars:
        raise ValidationFailed(f"{field_name} is longer than {max_chars} characters", field=field_name)
    if "\x00" in value:
        raise ValidationFailed(f"{field_name} must not contain NUL characters", field=field_name)
    return value


def require_path(value: object, field_name: str = "path") -> str:
    return require_str(value, field_name, max_chars=MAX_PATH_CHARS)


def require_number(value: object, field_name: str, *, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationFailed(f"{field_name} must be a number, not {type(value).__name__}", field=field_name)
    if not (low <= value <= high):  # also rejects NaN
        raise ValidationFailed(
            f"{field_name} must be between {low} and {high}, got {value}", field=field_name
        )
    return float(value)


def require_int(value: object, field_name: str, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed(
            f"{field_name} must be an integer, not {type(value).__name__}", field=field_name
        )
    if not (low <= value <= high):
        raise ValidationFailed(
            f"{field_name} must be between {low} and {high}, got {value}", field=field_name
        )
    return value


def require_bool(value: object, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed(
            f"{field_name} must be true or false, not {type(value).__name__}", field=field_name
        )
    return value


# --- patterns ---

PATTERN_SCHEMA: Final[Mapping[str, Any]] = {
    **TEXT_SCHEMA,
    "maxLength": MAX_PATTERN_CHARS,
    "description": "an RE2 regular expression (searched; no backreferences or lookaround)",
}
PATH_SCHEMA: Final[Mapping[str, Any]] = {
    **TEXT_SCHEMA,
    "maxLength": MAX_PATH_CHARS,
    "description": "relative to the workspace folder",
}


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


def require_pattern(value: object) -> str:
    pattern = require_str(value, "pattern", max_chars=MAX_PATTERN_CHARS)
    compile_pattern(pattern)
    return pattern


def search(pattern: str, content: bytes, where: str) -> tuple[str, str]:
    """Search ``content`` (UTF-8, undecodable bytes replaced) for ``pattern``: ``passed`` naming the match, or
    ``no_match``."""
    found = compile_pattern(pattern).search(content.decode("utf-8", errors="replace"))
    if found is None:
        return NO_MATCH, f"no match for {pattern!r} in {where}"
    return PASSED, f"{pattern!r} matched {found.group(0)[:200]!r} in {where}"
