"""Projects (the tenant, SPEC T0) and the tokens (agents' and operators') that act within one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nexum.core.errors import ValidationFailed
from nexum.core.events import DomainEvent, event_type, upcaster
from nexum.core.roles import AGENT

SLUG_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
TOKEN_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
PROJECT_NAME_MAX = 200


def project_stream(project_id: str) -> str:
    return f"project-{project_id}"


def validate_slug(slug: str) -> str:
    if not SLUG_PATTERN.fullmatch(slug):
        raise ValidationFailed(
            "a project slug is 1–63 lowercase letters, digits or dashes, starting with a letter or digit",
            field="slug",
        )
    return slug


def validate_project_name(name: str) -> str:
    """A project's display name, stripped: not blank, at most 200 characters, one line."""
    name = name.strip()
    if not name:
        raise ValidationFailed("a project needs a name", field="name")
    if len(name) > PROJECT_NAME_MAX or not name.isprintable():
        raise ValidationFailed(
            f"a project name is one line of at most {PROJECT_NAME_MAX} printable characters", field="name"
        )
    return name


def validate_token_name(name: str) -> str:
    """Who holds a token, as the log names them (``agent:<name>``): 1–100 letters, digits, dots, dashes or
    underscores, starting with a letter or digit."""
    if not TOKEN_NAME_PATTERN.fullmatch(name):
        raise ValidationFailed(
            "a token name is 1–100 letters, digits, dots, dashes or underscores, starting with a letter or"
            " digit",
            field="name",
        )
    return name


@event_type("ProjectCreated", version=2)
@dataclass(frozen=True)
class ProjectCreated(DomainEvent):
    project_id: str
    slug: str
    name: str
    description: str


@upcaster("ProjectCreated", from_version=1)
def _project_created_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had no description."""
    return {**data, "description": ""}


def validate_relevance_floor(value: Any, *, field: str = "relevance_floor") -> float | None:
    """A project's relevance floor: a number from 0 to 1 (0: no floor), or ``None`` for the service's
    ``NEXUM_RELEVANCE_FLOOR``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValidationFailed(
            "relevance_floor is a number from 0 to 1 (0: no floor), or null for the service's default",
            field=field,
        )
    return float(value)


@event_type("ProjectRelevanceFloorSet")
@dataclass(frozen=True)
class ProjectRelevanceFloorSet(DomainEvent):
    """The project's relevance floor for its compiles (issue 24 item 3); ``None``: back to the service's
    ``NEXUM_RELEVANCE_FLOOR``. Each compile records the floor it applied, so a replay is unaffected."""

    relevance_floor: float | None
    previous: float | None = None


@event_type("ProjectHighRiskApprovalSet")
@dataclass(frozen=True)
class ProjectHighRiskApprovalSet(DomainEvent):
    """The stage at which the project's high-risk tasks wait for an operator's approval when their contract
    says nothing (``nexum.core.verification.approvals``): ``before_start``, ``before_complete``, or ``None``
    for none."""

    high_risk_approval: str | None
    previous: str | None = None


@event_type("AgentTokenIssued", version=2)
@dataclass(frozen=True)
class AgentTokenIssued(DomainEvent):
    """A credential for one caller in one project, with its role (``nexum.core.roles``: ``agent`` or
    ``operator``). Only the key's sha256 is recorded, never the key."""

    token_id: str
    name: str
    key_prefix: str
    key_sha256: str
    role: str


@upcaster("AgentTokenIssued", from_version=1)
def _agent_token_issued_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had no roles: every token was an agent's."""
    return {**data, "role": AGENT}


@event_type("AgentTokenRevoked")
@dataclass(frozen=True)
class AgentTokenRevoked(DomainEvent):
    token_id: str
    reason: str


@event_type("HealthPinged")
@dataclass(frozen=True)
class HealthPinged(DomainEvent):
    """Written by the health-ping worker task: proof that a worker reached the database."""

    ping_id: str
