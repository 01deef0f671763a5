"""``artifact_matches``: a recorded artifact of the project holds a match of an RE2 pattern."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from nexum.core.errors import ValidationFailed
from nexum.core.text import NOT_BLANK
from nexum.core.verification.checks.base import (
    MISSING_FILE,
    PATTERN_SCHEMA,
    CheckContext,
    CheckSpec,
    member,
    require_pattern,
    require_str,
    search,
)
from nexum.core.verification.checks.registry import check_kind

MAX_DIGEST_CHARS: Final = 200


@check_kind("artifact_matches")
@dataclass(frozen=True)
class ArtifactMatchesCheck(CheckSpec):
    """Require the content of the artifact with ``artifact_digest`` to contain a match of ``pattern`` (an RE2
    search, as for ``FileMatchesCheck``)."""

    artifact_digest: str = member(
        type="string",
        pattern=f"^{NOT_BLANK}+$",
        maxLength=MAX_DIGEST_CHARS,
        description="sha256 of a recorded artifact",
    )
    pattern: str = member(**PATTERN_SCHEMA)

    def __post_init__(self) -> None:
        super().__post_init__()
        digest = require_str(self.artifact_digest, "artifact_digest", max_chars=MAX_DIGEST_CHARS)
        if any(ch.isspace() for ch in digest):
            raise ValidationFailed("artifact_digest must not contain whitespace", field="artifact_digest")
        require_pattern(self.pattern)

    def evaluate(self, context: CheckContext) -> tuple[str, str]:
        artifact = context.load_artifact(self.artifact_digest)
        if artifact is None:
            return MISSING_FILE, f"no artifact with digest {self.artifact_digest}"
        return search(self.pattern, artifact, self.artifact_digest)
