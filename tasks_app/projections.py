from __future__ import annotations

import uuid

from nexum.core.projects import AgentTokenIssued, AgentTokenRevoked, ProjectCreated
from nexum.eventstore.projections import Projection, ReadModelRows, handles
from nexum.eventstore.store import StoredEvent
from tasks_app.models import AgentToken, Project


class ProjectProjection(Projection):
    models = (Project, AgentToken)

    @handles("ProjectCreated")
    def project_created(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ProjectCreated = stored.event  # type: ignore[assignment]
        rows.insert(
            Project,
            id=_uuid(event.project_id),
            slug=event.slug,
            name=event.name,
            description=event.description,
            created_at=stored.recorded_at,
            version=stored.version,
        )

    @handles("AgentTokenIssued")
    def token_issued(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: AgentTokenIssued = stored.event  # type: ignore[assignment]
        rows.insert(
            AgentToken,
            id=_uuid(event.token_id),
            project_id=_uuid(stored.project_id),
            name=event.name,
            key_prefix=event.key_prefix,
            key_sha256=event.key_sha256,
            issued_at=stored.recorded_at,
            revoked_at=None,
        )
        rows.update(Project, _uuid(stored.project_id), version=stored.version)

    @handles("AgentTokenRevoked")
    def token_revoked(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: AgentTokenRevoked = stored.event  # type: ignore[assignment]
        rows.update(AgentToken, _uuid(event.token_id), revoked_at=stored.recorded_at)
        rows.update(Project, _uuid(stored.project_id), version=stored.version)


def _uuid(value: str | None) -> uuid.UUID:
    return uuid.UUID(str(value))
