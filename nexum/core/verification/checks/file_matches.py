"""``file_matches``: a file beneath the project's workspace holds a match of an RE2 pattern."""

from __future__ import annotations

from dataclasses import dataclass

from nexum.core.verification.checks.base import (
    MISSING_FILE,
    PATH_SCHEMA,
    PATTERN_SCHEMA,
    CheckContext,
    CheckSpec,
    PreflightContext,
    member,
    require_path,
    require_pattern,
    search,
    workspace_member,
)
from nexum.core.verification.checks.registry import check_kind


@check_kind("file_matches")
@dataclass(frozen=True)
class FileMatchesCheck(CheckSpec):
    """Require the file at ``path`` (relative to the project's workspace) to contain a match of ``pattern``.

    Matching is an RE2 search (linear time; see ``compile_pattern``) over the UTF-8 text (undecodable bytes
    replaced); use inline flags such as ``(?m)`` or ``(?i)`` in the pattern.
    """

    path: str = member(**PATH_SCHEMA)
    pattern: str = member(**PATTERN_SCHEMA)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_path(self.path)
        require_pattern(self.pattern)

    def preflight(self, context: PreflightContext, field_name: str) -> None:
        workspace_member(self, context, "path", field_name)

    def evaluate(self, context: CheckContext) -> tuple[str, str]:
        content = context.read_workspace_file(self.path)
        if content is None:
            return MISSING_FILE, f"{self.path} is not a regular file"
        return search(self.pattern, content, self.path)
