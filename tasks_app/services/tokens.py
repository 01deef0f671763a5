"""Agent and operator tokens: issued (the secret shown once, only its sha256 stored) and revoked, each an
event on the project's stream."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass

from nexum.core.errors import Conflict, NotFound
from nexum.core.roles import AGENT, validate_role
from nexum.core.tasks.projects import AgentTokenIssued, AgentTokenRevoked, project_stream, validate_token_name
from nexum.eventstore import store
from tasks_app import selectors
from tasks_app.models import AgentToken

TOKEN_PREFIX = "nx_"


@dataclass(frozen=True)
class IssuedToken:
    token: AgentToken
    key: str
    """The secret, shown once. Only its sha256 is stored."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def agent_token_issue(
    *, project_id: str, name: str, actor: str, role: str = AGENT, key: str | None = None
) -> IssuedToken:
    """Issue a token for an agent or, with ``role="operator"``, for an operator (``nexum.core.roles``).
    ``key`` may be supplied (the development demo tokens); it is never stored."""
    project = selectors.project_get(project_id=project_id)
    validate_role(role)
    validate_token_name(name)
    if AgentToken.objects.filter(project=project, name=name).exists():
        raise Conflict(
            f"project {project.slug} already has a token named {name!r}", field="name", code="token_exists"
        )
    key = key or TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = str(uuid.uuid4())
    store.append(
        stream_id=project_stream(str(project.id)),
        events=[
            AgentTokenIssued(
                token_id=token_id, name=name, key_prefix=key[:8], key_sha256=hash_key(key), role=role
            )
        ],
        expected_version=project.version,
        actor=actor,
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
            actor=actor,
            project_id=str(token.project_id),
        )
        token.refresh_from_db()
    return token
