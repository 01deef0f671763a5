"""Writes to projects and agent tokens. Every change is an event; read models follow by projection."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass

from nexum.core.errors import Conflict, NotFound, ValidationFailed
from nexum.core.projects import (
    AgentTokenIssued,
    AgentTokenRevoked,
    ProjectCreated,
    check_slug,
    project_stream,
)
from nexum.eventstore import store
from tasks_app.models import AgentToken, Project

TOKEN_PREFIX = "nx_"


@dataclass(frozen=True)
class IssuedToken:
    token: AgentToken
    key: str
    """The secret, shown once. Only its sha256 is stored."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def project_create(*, slug: str, name: str, description: str = "", actor: str) -> Project:
    check_slug(slug)
    if not name.strip():
        raise ValidationFailed("a project needs a name", field="name")
    if Project.objects.filter(slug=slug).exists():
        raise Conflict(f"a project with slug {slug!r} already exists", field="slug", code="project_exists")
    project_id = str(uuid.uuid4())
    store.append(
        stream_id=project_stream(project_id),
        events=[ProjectCreated(project_id=project_id, slug=slug, name=name.strip(), description=description)],
        expected_version=0,
        metadata={"actor": actor},
        project_id=project_id,
    )
    return Project.objects.get(id=project_id)


def agent_token_issue(*, project_id: str, name: str, actor: str, key: str | None = None) -> IssuedToken:
    """Issue a token for an agent. ``key`` may be supplied (development demo token); it is never stored."""
    project = _project(project_id)
    if not name.strip():
        raise ValidationFailed("a token needs a name", field="name")
    if AgentToken.objects.filter(project=project, name=name).exists():
        raise Conflict(
            f"project {project.slug} already has a token named {name!r}", field="name", code="token_exists"
        )
    key = key or TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = str(uuid.uuid4())
    store.append(
        stream_id=project_stream(str(project.id)),
        events=[AgentTokenIssued(token_id=token_id, name=name, key_prefix=key[:8], key_sha256=hash_key(key))],
        expected_version=project.version,
        metadata={"actor": actor},
        project_id=str(project.id),
    )
    return IssuedToken(AgentToken.objects.get(id=token_id), key)


def agent_token_revoke(*, token_id: str, reason: str, actor: str) -> AgentToken:
    token = AgentToken.objects.select_related("project").filter(id=token_id).first()
    if token is None:
        raise NotFound(f"no agent token {token_id}", field="token_id")
    if token.revoked_at is None:
        store.append(
            stream_id=project_stream(str(token.project_id)),
            events=[AgentTokenRevoked(token_id=str(token.id), reason=reason)],
            expected_version=token.project.version,
            metadata={"actor": actor},
            project_id=str(token.project_id),
        )
        token.refresh_from_db()
    return token


def _project(project_id: str) -> Project:
    project = Project.objects.filter(id=project_id).first()
    if project is None:
        raise NotFound(f"no project {project_id}", field="project_id")
    return project
