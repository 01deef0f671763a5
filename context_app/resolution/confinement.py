"""The operator's confinement of a project's context sources, built from settings (see
``nexum.adapters.source_policy`` for the rules)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from nexum.adapters.source_policy import HTTP_ALLOW_SETTING, SourcePolicy
from nexum.adapters.workspaces import project_published, project_workspace

SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")


def database_files() -> list[Path]:
    """The SQLite database files in use (with their journal companions); none on PostgreSQL."""
    files = []
    for connection in connections.all():
        name = str(connection.settings_dict.get("NAME") or "")
        if connection.vendor == "sqlite" and name and name != ":memory:" and not name.startswith("file:"):
            files += [Path(name + suffix) for suffix in SQLITE_COMPANIONS]
    return files


def forbidden_places() -> list[tuple[str, Path]]:
    """What no source may read, whatever the roots say."""
    return [
        ("the data directory", Path(settings.DATA_DIR)),
        ("the artifact store", Path(settings.NEXUM_ARTIFACT_ROOT)),
        (
            "the workspace root (a project reads only its own folder there)",
            Path(settings.NEXUM_WORKSPACE_ROOT),
        ),
        (
            "the published root (a project reads only its own folder there)",
            Path(settings.NEXUM_PUBLISHED_ROOT),
        ),
        *(("the database", path) for path in database_files()),
    ]


def source_policy(*, project_slug: str) -> SourcePolicy:
    """Where the sources of one project may read: ``NEXUM_SOURCE_ROOTS`` (its own workspace folder, not
    another project's) and the hosts of ``NEXUM_SOURCE_HTTP_ALLOW``; what lies under
    ``NEXUM_WORKSPACE_ROOT`` the agent can write."""
    try:
        return SourcePolicy.build(
            roots=settings.NEXUM_SOURCE_ROOTS,
            forbidden=forbidden_places(),
            project_workspace=project_workspace(project_slug),
            project_published=project_published(project_slug),
            http_allow=settings.NEXUM_SOURCE_HTTP_ALLOW,
            agent_writable=[settings.NEXUM_WORKSPACE_ROOT],
        )
    except ValueError as error:
        raise ImproperlyConfigured(f"{HTTP_ALLOW_SETTING}: {error}") from None
