"""SQLite with the function the event table's append-only triggers consult.

The DELETE trigger on ``nexum_event`` refuses unless ``nexum_event_maintenance()`` returns 1. Only the
``flush`` command (test teardown, wiping a development database) turns maintenance on, for the duration of
that command. A connection that lacks the function (the sqlite3 shell, another program) fails the DELETE
with "no such function", so the log stays append-only there too. UPDATE is refused unconditionally.
"""

from __future__ import annotations

from django.db.backends.sqlite3 import base


class DatabaseWrapper(base.DatabaseWrapper):
    event_maintenance = False

    def get_new_connection(self, conn_params):  # type: ignore[no-untyped-def]
        connection = super().get_new_connection(conn_params)
        connection.create_function(
            "nexum_event_maintenance", 0, lambda: int(self.event_maintenance), deterministic=False
        )
        return connection
