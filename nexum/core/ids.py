"""Ids: parsing a caller's UUID, and the namespace of every family of ids Nexum derives with ``uuid5``.

A derived id is a function of what identifies the thing (a project and an idempotency key, an item and an
embedder…), so a retried write finds the row the first one made. Each family has its own namespace, all of
them here; changing one changes every id it derives, so they never change."""

from __future__ import annotations

import uuid


def as_uuid(value: object) -> uuid.UUID:
    """``value`` as a ``uuid.UUID``; a malformed value raises ``ValueError``."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def uuid_or_none(value: object) -> uuid.UUID | None:
    """``value`` as a ``uuid.UUID``, or None when it is not one (a caller's id that cannot match any row)."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        return None


AGENT_APPROVAL_IDS = uuid.UUID("8d0b6c55-3f3a-4e0f-8a8e-0c9b1f6e7a22")
"""Approvals an agent asks for before an action of its own."""

CATALOG_WORD_ROW_IDS = uuid.UUID("6f1d3c2a-8e57-4a51-9a3e-0c7d4b1f2e90")
"""A project's catalog rows, one per word."""

WORLD_IDS = uuid.UUID("6b3c1f0e-5d2a-4c8e-9a71-0f4e2b8d9c13")
"""The world's writes: superseding facts, tools, tool scopes."""

ITEM_VECTOR_IDS = uuid.UUID("8b7f2c1e-3d4a-4f6b-9c2d-1a5e7f9b3c60")
"""An item's stored vector, per embedder."""

BUNDLE_ITEM_ROW_IDS = uuid.UUID("0b7e9c55-3f3a-4f7e-8a61-2d5c1e9b7a40")
"""A resolve's bundle items, by ordinal."""

PRUNE_IDS = uuid.UUID("8c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f")
"""The record of one piece of content retention pruned."""

COMPILATION_IDS = uuid.UUID("2d0f3c6a-8f0e-4b7a-a4e2-5b1e6f1c9a37")
"""Stored contexts, compile requests, compile evidence and usage reports."""

FORK_IDS = uuid.UUID("6c0b9d3e-27a1-4f8e-b5d2-9e4f1a7c3b27")
"""A fork's goal, from the operator's idempotency key."""

RETENTION_RUN_IDS = uuid.UUID("2f5b8a44-7c1e-4d0e-9a55-3b7f6b2c9e10")
"""A retention run of a project."""

GOAL_IDS = uuid.UUID("4f1c7f9e-2f53-4d0c-9a55-6c1f0f7f6a10")
"""A goal created with an idempotency key."""

COMPLETION_REQUEST_IDS = uuid.UUID("2b8f3f5e-7a61-4c3e-9d0b-0e5b9b6a51c1")
"""A completion request, per task version."""

GATE_APPROVAL_IDS = uuid.UUID("2a5c1c0e-6d0e-4c7a-9c1f-5b8a7e3d9f41")
"""The approval the gate asks for, per task, action and attempt."""

RESOLUTION_IDS = uuid.UUID("3d2c9a71-6b0e-4f5a-9c1d-8e7f4a2b5c60")
"""Sources, grants, resolves and their escalations."""
