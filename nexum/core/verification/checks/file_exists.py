"""``file_exists``: a file at a path beneath the project's workspace."""

from __future__ import annotations

from dataclasses import dataclass

from nexum.core.verification.checks.base import (
    PASSED,
    PATH_SCHEMA,
    CheckContext,
    CheckSpec,
    PreflightContext,
    member,
    require_path,
    workspace_member,
)
from nexum.core.verification.checks.registry import check_kind


@check_kind("file_exists")
@dataclass(frozen=True)
class FileExistsCheck(CheckSpec):
    """Require ``path`` (relative to the project's workspace folder) to exist."""

    path: str = member(**PATH_SCHEMA)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_path(self.path)

    def preflight(self, context: PreflightContext, field_name: str) -> None:
        workspace_member(self, context, "path", field_name)

    def evaluate(self, context: CheckContext) -> tuple[str, str]:
        context.require_workspace_file(self.path)
        return PASSED, f"{self.path} exists"
