"""Appends take their project's advisory lock (issue 26): ``nexum_event_lock()``, the SECURITY DEFINER
function through which the runtime role took the log-wide table lock (migration 0003), is no longer called,
so it goes. Reversed, it is created again as 0003 made it."""

import importlib

from django.db import migrations

OWNER_ONLY = importlib.import_module("nexum.eventstore.migrations.0003_owner_only_maintenance")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS nexum_event_lock()", params=None)


def create_again(apps, schema_editor):
    OWNER_ONLY.forward(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("eventstore", "0004_project_position")]
    operations = [migrations.RunPython(drop, create_again)]
