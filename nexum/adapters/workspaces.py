"""Where a project's files live: its own workspace folder under ``NEXUM_WORKSPACE_ROOT`` (the agent writes
there), and its folder of published read-only copies under ``NEXUM_PUBLISHED_ROOT`` (the operator's)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from nexum.core.tasks.projects import validate_slug


def project_workspace(project_slug: str) -> Path:
    """The workspace folder of a project, ``<NEXUM_WORKSPACE_ROOT>/<project slug>`` (it may not exist yet)."""
    return Path(settings.NEXUM_WORKSPACE_ROOT) / validate_slug(project_slug)


def project_published(project_slug: str) -> Path:
    """The folder of a project's published copies, ``<NEXUM_PUBLISHED_ROOT>/<project slug>`` (it may not
    exist yet): content the operator put there for sources, which the agent cannot write."""
    return Path(settings.NEXUM_PUBLISHED_ROOT) / validate_slug(project_slug)
