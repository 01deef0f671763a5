"""Start-up checks of where content lives (``manage.py check``; ``runserver`` and ``migrate`` run them too).

``NEXUM_EMBEDDER`` must name an embedder this process can load: items get their vectors when they are
stored, so a typo must stop the server at start-up, not fail the first append.

The artifact store holds every recorded artifact, check output and model answer of every project; a command
check may write anywhere in its workspace. The two must not overlap, or a check could plant or rewrite
stored content (reads verify digests, but a workspace must not even see the store).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from context_app.world.embedder import configured_embedder
from nexum.adapters.embedding import UnknownEmbedder
from nexum.adapters.source_policy import HTTP_ALLOW_SETTING, HostEntry


def _real(path: Any) -> Path:
    return Path(os.path.realpath(path))


@register()
def artifact_store_outside_workspaces(**kwargs: Any) -> list[Error]:
    store, workspace = _real(settings.NEXUM_ARTIFACT_ROOT), _real(settings.NEXUM_WORKSPACE_ROOT)
    if store == workspace or store.is_relative_to(workspace) or workspace.is_relative_to(store):
        return [
            Error(
                f"NEXUM_ARTIFACT_ROOT ({store}) and NEXUM_WORKSPACE_ROOT ({workspace}) overlap",
                hint="Keep the artifact store outside every workspace (and no workspace inside the store).",
                id="nexum.E001",
            )
        ]
    return []


@register()
def source_settings_are_well_formed(**kwargs: Any) -> list[Error]:
    errors = []
    for root in settings.NEXUM_SOURCE_ROOTS:
        if not Path(root).is_absolute():
            errors.append(
                Error(f"NEXUM_SOURCE_ROOTS entry {str(root)!r} is not an absolute path", id="nexum.E002")
            )
    for entry in settings.NEXUM_SOURCE_HTTP_ALLOW:
        try:
            HostEntry.parse(entry)
        except ValueError as error:
            errors.append(Error(f"{HTTP_ALLOW_SETTING}: {error}", id="nexum.E003"))
    return errors


@register()
def embedder_loads(**kwargs: Any) -> list[Error]:
    try:
        configured_embedder()
    except UnknownEmbedder as error:
        return [
            Error(
                str(error.message),
                hint="set NEXUM_EMBEDDER to 'wordllama', 'none' or 'package.module:factory'",
                id="nexum.E006",
            )
        ]
    return []
