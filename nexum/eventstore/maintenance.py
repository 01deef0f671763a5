"""The one sanctioned way around the event table's append-only triggers: wiping a whole database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections


@contextmanager
def event_maintenance(using: str = "default") -> Iterator[None]:
    """Let ``flush`` empty the event table on this connection for the duration of the block."""
    connection = connections[using]
    connection.ensure_connection()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET nexum.event_maintenance = 'on'")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET nexum.event_maintenance")
    else:
        connection.event_maintenance = True
        try:
            yield
        finally:
            connection.event_maintenance = False
