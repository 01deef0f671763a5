"""What a compile is set to use, read from the project and the settings: the relevance floor, the embedder it
ranks by (a replay: the one its compile recorded) and the compaction summarizer.
"""

from __future__ import annotations

import contextlib

from django.conf import settings

from context_app.compilation.selectors import compile_input
from context_app.world.embedder import configured_embedder, embedder_setting
from nexum.adapters.embedding import DEFAULT_EMBEDDER, Embedder, embedder_id, embedder_named
from nexum.core.compilation.model import DEFAULT_RELEVANCE_FLOOR
from nexum.core.errors import DomainError, PolicyRefused, ValidationFailed
from tasks_app.models import Project

DEFAULT_SUMMARIZER = "nexum.core.compilation.rules.extractive_summary"


def compile_embedder(version: int) -> Embedder | None:
    """The embedder a compile of ``version`` ranks by: the configured one from ``VECTORS_FROM``."""
    return configured_embedder() if version >= compile_input.VECTORS_FROM else None


def recorded_embedder(recorded: str | None) -> Embedder | None:
    """The embedder a stored context was compiled with (``name@version``; empty or ``None``: none, as for
    every context compiled before embedders), loaded: the configured one or the default when either is
    it; otherwise refused (``embedder_unavailable``) naming both, since its vectors cannot be remade here."""
    if not recorded:
        return None
    candidates = [embedder_setting(), DEFAULT_EMBEDDER]
    for spec in dict.fromkeys(candidates):
        with contextlib.suppress(DomainError):
            embedder = embedder_named(spec)
            if embedder is not None and embedder_id(embedder) == recorded:
                return embedder
    raise PolicyRefused(
        f"this context was compiled with the embedder {recorded}, which this process cannot load "
        f"(NEXUM_EMBEDDER is {embedder_setting()!r}): set NEXUM_EMBEDDER to that embedder to replay it",
        field="embedder",
        code="embedder_unavailable",
        details={"embedder": recorded},
    )


def relevance_floor(project_id: str | None = None) -> float:
    """The relevance floor compiles of the project apply: its own when set
    (``PUT /api/v1/project/compile-settings``),
    else ``NEXUM_RELEVANCE_FLOOR``, checked: a number from 0 to 1."""
    if project_id is not None:
        own = Project.objects.filter(id=project_id).values_list("relevance_floor", flat=True).first()
        if own is not None:
            return float(own)
    floor = getattr(settings, "NEXUM_RELEVANCE_FLOOR", DEFAULT_RELEVANCE_FLOOR)
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0.0 <= floor <= 1.0:
        raise ValidationFailed("NEXUM_RELEVANCE_FLOOR must be a number from 0 to 1", field="relevance_floor")
    return float(floor)


def summarizer_path() -> str:
    return str(getattr(settings, "NEXUM_COMPACTION_SUMMARIZER", DEFAULT_SUMMARIZER))
