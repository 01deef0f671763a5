"""The embedder this process uses (``NEXUM_EMBEDDER``): one place turns the setting into an ``Embedder``, so a
projection writing vectors, a compile embedding its query and ``manage.py check`` agree on it."""

from __future__ import annotations

from django.conf import settings

from nexum.adapters.embedding import DEFAULT_EMBEDDER, Embedder, embedder_id, embedder_named


def embedder_setting() -> str:
    return str(getattr(settings, "NEXUM_EMBEDDER", DEFAULT_EMBEDDER) or DEFAULT_EMBEDDER)


def configured_embedder() -> Embedder | None:
    """The embedder ``NEXUM_EMBEDDER`` names (loaded once per process; ``None`` for ``none``). Raises
    ``UnknownEmbedder`` with the setting's value when it names nothing loadable."""
    return embedder_named(embedder_setting())


def configured_embedder_id() -> str:
    """``name@version`` of the configured embedder; empty for ``none``."""
    return embedder_id(configured_embedder())
