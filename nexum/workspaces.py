"""Where a project's files live: its own workspace folder under ``NEXUM_WORKSPACE_ROOT``."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from nexum.core.projects import check_slug


def project_workspace(project_slug: str) -> Path:
    """The workspace folder of a project, ``<NEXUM_WORKSPACE_ROOT>/<project slug>`` (it may not exist yet)."""
    return Path(settings.NEXUM_WORKSPACE_ROOT) / check_slug(project_slug)
