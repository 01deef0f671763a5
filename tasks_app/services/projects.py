"""Writes to a project: its creation and its settings (relevance floor, high-risk approval stage, retention
policy), each an event on the project's stream."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from nexum.core.compilation.retention import ProjectRetentionSet, validate_retention_policy
from nexum.core.errors import Conflict
from nexum.core.tasks.projects import (
    ProjectCreated,
    ProjectHighRiskApprovalSet,
    ProjectRelevanceFloorSet,
    project_stream,
    validate_project_name,
    validate_relevance_floor,
    validate_slug,
)
from nexum.core.verification.approvals import validate_stage_setting
from nexum.eventstore import store
from tasks_app import selectors
from tasks_app.models import Project


def project_create(*, slug: str, name: str, description: str = "", actor: str) -> Project:
    validate_slug(slug)
    name = validate_project_name(name)
    if Project.objects.filter(slug=slug).exists():
        raise Conflict(f"a project with slug {slug!r} already exists", field="slug", code="project_exists")
    project_id = str(uuid.uuid4())
    store.append(
        stream_id=project_stream(project_id),
        events=[ProjectCreated(project_id=project_id, slug=slug, name=name, description=description)],
        expected_version=0,
        actor=actor,
        project_id=project_id,
    )
    return Project.objects.get(id=project_id)


def project_relevance_floor_set(*, project_id: str, relevance_floor: Any, actor: str) -> Project:
    """Set the project's relevance floor (a number from 0 to 1, or ``None`` for ``NEXUM_RELEVANCE_FLOOR``),
    as an event; the same value again writes nothing. Whether the caller may is the caller's check (an
    operator's: the API's and the admin's)."""
    project = selectors.project_get(project_id=project_id)
    floor = validate_relevance_floor(relevance_floor)
    if floor == project.relevance_floor:
        return project
    store.append(
        stream_id=project_stream(str(project.id)),
        events=[ProjectRelevanceFloorSet(relevance_floor=floor, previous=project.relevance_floor)],
        expected_version=project.version,
        actor=actor,
        project_id=str(project.id),
    )
    project.refresh_from_db()
    return project


def project_high_risk_approval_set(*, project_id: str, high_risk_approval: Any, actor: str) -> Project:
    """Set the stage at which the project's high-risk tasks wait for an operator's approval when their
    contract says nothing (``before_start``, ``before_complete`` or ``None``), as an event; the same value
    again writes nothing. Whether the caller may is the caller's check (an operator's: the API's)."""
    project = selectors.project_get(project_id=project_id)
    stage = validate_stage_setting(high_risk_approval)
    if stage == project.high_risk_approval:
        return project
    store.append(
        stream_id=project_stream(str(project.id)),
        events=[ProjectHighRiskApprovalSet(high_risk_approval=stage, previous=project.high_risk_approval)],
        expected_version=project.version,
        actor=actor,
        project_id=str(project.id),
    )
    project.refresh_from_db()
    return project


def project_retention(project: Project) -> dict[str, int | None]:
    """The project's own retention policy, by member (``None``: the service's default)."""
    return {
        "context_days": project.retention_context_days,
        "bundle_days": project.retention_bundle_days,
        "check_output_days": project.retention_check_output_days,
    }


def project_retention_set(*, project_id: str, policy: Mapping[str, Any], actor: str) -> Project:
    """Set the project's retention policy (each member a number of days, or ``None`` for the service's
    ``NEXUM_RETENTION_…_DAYS``), as an event; the same policy again writes nothing. Whether the caller may is
    the caller's check (an operator's)."""
    project = selectors.project_get(project_id=project_id)
    checked = validate_retention_policy(policy)
    if checked == project_retention(project):
        return project
    store.append(
        stream_id=project_stream(str(project.id)),
        events=[ProjectRetentionSet(**checked)],
        expected_version=project.version,
        actor=actor,
        project_id=str(project.id),
    )
    project.refresh_from_db()
    return project
