"""``command``: run a program (no shell) in the project's workspace, in the sandbox; exit status 0 passes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from nexum.core.errors import ValidationFailed
from nexum.core.verification.checks.base import (
    DENIED_EXECUTABLE,
    PATH_SCHEMA,
    CheckContext,
    CheckRefused,
    CheckResult,
    CheckSpec,
    DeniedExecutable,
    PreflightContext,
    member,
    require_int,
    require_number,
    require_path,
    workspace_member,
)
from nexum.core.verification.checks.registry import check_kind

MAX_ARGV_ITEMS: Final = 256
MAX_ARGV_CHARS: Final = 64 * 1024  # sum over all arguments
MIN_TIMEOUT_S: Final = 0.1
MAX_TIMEOUT_S: Final = 3600.0
DEFAULT_TIMEOUT_S: Final = 300.0
MAX_OUTPUT_BYTES_LIMIT: Final = 16 * 1024 * 1024
DEFAULT_MAX_OUTPUT_BYTES: Final = 64 * 1024


@check_kind("command")
@dataclass(frozen=True)
class CommandCheck(CheckSpec):
    """Run ``argv`` (no shell) in ``cwd`` and require exit status 0.

    ``cwd`` is relative to the project's workspace folder (an absolute path is allowed only if it resolves
    inside it; the sandbox enforces that). ``timeout_s`` is wall-clock; ``max_output_bytes`` caps the
    captured, merged stdout+stderr (the sandbox policy may cap both further).
    """

    argv: tuple[str, ...] = member(
        type="array",
        items={"type": "string"},
        minItems=1,
        maxItems=MAX_ARGV_ITEMS,
        description=f"program and arguments, no shell: the program not blank, at most {MAX_ARGV_CHARS}"
        " characters in all",
    )
    cwd: str = member(default=".", **PATH_SCHEMA)
    timeout_s: float = member(
        default=DEFAULT_TIMEOUT_S, type="number", minimum=MIN_TIMEOUT_S, maximum=MAX_TIMEOUT_S
    )
    max_output_bytes: int = member(
        default=DEFAULT_MAX_OUTPUT_BYTES, type="integer", minimum=1, maximum=MAX_OUTPUT_BYTES_LIMIT
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "argv", _require_argv(self.argv))
        require_path(self.cwd, "cwd")
        timeout = require_number(self.timeout_s, "timeout_s", low=MIN_TIMEOUT_S, high=MAX_TIMEOUT_S)
        object.__setattr__(self, "timeout_s", timeout)
        require_int(self.max_output_bytes, "max_output_bytes", low=1, high=MAX_OUTPUT_BYTES_LIMIT)

    def preflight(self, context: PreflightContext, field_name: str) -> None:
        """The working directory inside the workspace and the executable on the allowlist; a missing one is
        allowed (it may be installed before the run, which then records ``missing_executable``)."""
        resolved = workspace_member(self, context, "cwd", field_name)
        cwd = resolved if os.path.isdir(resolved) else context.workspace_root  # may be created later
        try:
            context.resolve_executable(self.argv[0], cwd=cwd)
        except CheckRefused as refusal:
            if refusal.reason == DENIED_EXECUTABLE:
                raise DeniedExecutable(refusal.message, field=f"{field_name}.argv[0]") from None

    def run(self, context: CheckContext) -> CheckResult:
        """The sandbox runs it and reports all of it; what it raises propagates (the run is killed)."""
        return context.run_command(self)


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
