"""Registering a source (SPEC R1): its configuration checked under the project's source policy, and
the spec the resolver reads it by."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from context_app.resolution.confinement import source_policy
from context_app.resolution.models import Source
from context_app.resolution.services.authority import require_content_authority
from nexum.adapters.sources.registry import build_source
from nexum.core.digests import canonical_json
from nexum.core.errors import Conflict, DomainError, ValidationFailed
from nexum.core.ids import RESOLUTION_IDS
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.model import Freshness, SourceSpec
from nexum.core.resolution.validation import validate_source_name
from nexum.core.trust import TrustClass
from nexum.eventstore import store
from tasks_app import selectors as task_selectors


def source_register(
    *,
    project_id: str,
    name: str,
    kind: str,
    config: Mapping[str, Any],
    actor: str,
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Source:
    """Register a source: its configuration is checked by building it (``build_source``) under the project's
    source policy (a path or host outside it is 422 ``source_not_allowed``); an error names the option as
    ``config.<option>``. Who can write it is recorded (R4a): the agent for a path inside the workspace root,
    whatever the configuration declares, else ``config.writable_by`` (default the operator); a source the
    agent can write has ``highest_trust`` at most ``agent_reported``. A configuration is stored in the log,
    so it must never hold a secret."""
    project = task_selectors.project_get(project_id=project_id)
    require_content_authority(
        project_id=str(project.id),
        action="source.register",
        content_trust=content_trust,
        derived_from=derived_from,
    )
    validate_source_name(name)
    if not isinstance(kind, str):
        raise ValidationFailed("kind must be a string", field="kind")
    if not isinstance(config, Mapping):
        raise ValidationFailed("config must be an object", field="config")
    try:
        canonical_json(dict(config))
    except (TypeError, ValueError) as error:
        raise ValidationFailed(f"config must be JSON: {error}", field="config") from None
    try:
        spec = build_source(kind, name, dict(config), policy=source_policy(project_slug=project.slug)).spec
    except DomainError as error:
        if error.field not in (None, "kind", "config"):
            error.field = f"config.{error.field}"
        raise
    source_id = str(uuid.uuid5(RESOLUTION_IDS, f"source:{project.id}:{name}"))
    if Source.objects.filter(project_id=project.id, name=name).exists():
        raise Conflict(f"a source named {name!r} already exists", field="name", code="source_exists")
    store.append(
        stream_id=resolution_events.source_stream(source_id),
        events=[
            resolution_events.SourceRegistered(
                source_id=source_id,
                name=name,
                kind=kind,
                config=dict(config),
                declared_scopes=spec.declared_scopes,
                highest_trust=spec.highest_trust.name,
                ttl_seconds=spec.freshness.ttl_seconds,
                track_revision=spec.freshness.track_revision,
                writable_by=spec.writable_by,
            )
        ],
        expected_version=0,
        actor=actor,
        project_id=str(project.id),
    )
    return Source.objects.get(id=source_id)


def source_spec(source: Source) -> SourceSpec:
    return SourceSpec(
        name=source.name,
        kind=source.kind,
        declared_scopes=tuple(source.declared_scopes),
        highest_trust=TrustClass.parse(source.highest_trust),
        freshness=Freshness(ttl_seconds=source.ttl_seconds, track_revision=source.track_revision),
        writable_by=source.writable_by,
    )
