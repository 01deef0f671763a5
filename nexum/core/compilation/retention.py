"""Retention (issue 27 item 4): a project's stored compiled contexts, bundles and check output older than
its policy's days are pruned to their digests and metadata. The events stay; each prune is an event of its
own (digests and byte counts, never content), so what was pruned is in the log (an export lists it) and a
replay of a pruned context recompiles it at its position and verifies its digest."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nexum.core.errors import ValidationFailed
from nexum.core.events import DomainEvent, event_type

RETENTION_DAYS_MAX = 36_500
"""A hundred years: more is a typo, not a policy."""

CONTEXTS = "contexts"
BUNDLES = "bundles"
CHECK_OUTPUT = "check_output"
PRUNED_KINDS = (CONTEXTS, BUNDLES, CHECK_OUTPUT)
POLICY_FIELDS = {
    CONTEXTS: "context_days",
    BUNDLES: "bundle_days",
    CHECK_OUTPUT: "check_output_days",
}
"""What each policy member keeps for that many days, by the kind of content it prunes."""


def retention_stream(project_id: str) -> str:
    return f"retention-{project_id}"


def validate_retention_days(value: Any, *, field: str) -> int | None:
    """Days to keep one kind of stored content: a whole number from 1 to ``RETENTION_DAYS_MAX``, or ``None``
    for the service's default (``NEXUM_RETENTION_…_DAYS``; unset there: kept for ever)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= RETENTION_DAYS_MAX:
        raise ValidationFailed(
            f"{field} is a whole number of days from 1 to {RETENTION_DAYS_MAX}, or null for the service's "
            "default",
            field=field,
        )
    return value


def validate_retention_policy(policy: Mapping[str, Any]) -> dict[str, int | None]:
    """A whole policy (every member of ``POLICY_FIELDS``), each member checked."""
    return {
        field: validate_retention_days(policy.get(field), field=field) for field in POLICY_FIELDS.values()
    }


@event_type("ProjectRetentionSet")
@dataclass(frozen=True)
class ProjectRetentionSet(DomainEvent):
    """The project's own retention policy: days to keep stored contexts, bundles and check output; ``None``
    for a member: the service's ``NEXUM_RETENTION_…_DAYS``."""

    context_days: int | None
    bundle_days: int | None
    check_output_days: int | None


@event_type("ContextPruned")
@dataclass(frozen=True)
class ContextPruned(DomainEvent):
    """A stored compiled context's content (prompt block, exclusion runs) was dropped; its digest and
    metadata stay, and a replay recompiles it at ``position``."""

    digest: str
    task_id: str
    position: int
    bytes_freed: int


@event_type("BundlePruned")
@dataclass(frozen=True)
class BundlePruned(DomainEvent):
    """A bundle's content was dropped (no stored context was compiled from it, nor is it a task's latest)."""

    digest: str
    bytes_freed: int


@event_type("CheckOutputPruned")
@dataclass(frozen=True)
class CheckOutputPruned(DomainEvent):
    """A check run's captured output was removed from the artifact store (nothing else referred to it)."""

    sha256: str
    bytes_freed: int
