"""The project's append lock: every append takes it before it numbers its events (``store``), so one
project's appends are serialized and commit in order; a consistent read inside a caller's transaction
(``reading``) and an import (``importing``) take it too.
"""

from __future__ import annotations

from django.db import connection

# The project's append lock: a transaction-scoped advisory lock, keyed by a constant for Nexum's event log and
# a hash of the project id ('' for the events without a project). Two projects whose hashes collide share a
# lock, which only serializes them. Advisory locks need no privilege on the table.
PROJECT_LOCK_CLASS = 26_0001
LOCK_PROJECT = "SELECT pg_advisory_xact_lock(%(lock_class)s, hashtext(COALESCE(%(project)s::text, '')))"


def lock_project(project_id: str | None) -> None:
    """Hold the project's append lock until commit, so no event of the project lands meanwhile (PostgreSQL;
    on SQLite the transaction already began with ``BEGIN IMMEDIATE``)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(LOCK_PROJECT, {"lock_class": PROJECT_LOCK_CLASS, "project": project_id})
