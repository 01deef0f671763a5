"""Each event gets its place in its project's log (issue 26): ``project_position``, gapless from 1 per
project (events without a project form one more log), assigned to the existing events in log order.

The log is append-only, so its UPDATE guard is lifted for the one statement that fills the new column and
put back in the same transaction (PostgreSQL: the row trigger disabled and enabled by the owner). SQLite
alters a column or adds a constraint by copying the table, which drops its triggers: they are created again,
as migration 0002 made them, at the end.
"""

import importlib

from django.db import migrations, models

NUMBER_IN_LOG_ORDER = {
    "postgresql": """
        UPDATE nexum_event AS e SET project_position = n.place
        FROM (SELECT position, row_number() OVER (PARTITION BY project_id ORDER BY position) AS place
              FROM nexum_event) AS n
        WHERE e.position = n.position
    """,
    "sqlite": """
        UPDATE nexum_event SET project_position = (
            SELECT COUNT(*) FROM nexum_event AS earlier
            WHERE earlier.project_id IS nexum_event.project_id AND earlier.position <= nexum_event.position)
    """,
}

APPEND_ONLY = importlib.import_module("nexum.eventstore.migrations.0002_append_only_triggers")


def number_existing_events(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        statements = [
            "ALTER TABLE nexum_event DISABLE TRIGGER nexum_event_no_update_or_delete",
            NUMBER_IN_LOG_ORDER[vendor],
            "ALTER TABLE nexum_event ENABLE TRIGGER nexum_event_no_update_or_delete",
        ]
    elif vendor == "sqlite":
        statements = [*APPEND_ONLY.SQLITE_BACKWARD, NUMBER_IN_LOG_ORDER[vendor]]
    else:
        raise RuntimeError(f"Nexum supports PostgreSQL and SQLite, not {vendor}")
    for statement in statements:
        schema_editor.execute(statement, params=None)


def guard_sqlite_again(apps, schema_editor):
    """SQLite: the append-only triggers again, on the table the previous operations copied."""
    if schema_editor.connection.vendor == "sqlite":
        for statement in [*APPEND_ONLY.SQLITE_BACKWARD, *APPEND_ONLY.SQLITE_FORWARD]:
            schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("eventstore", "0003_owner_only_maintenance")]
    operations = [
        # Undone last when the migration is reversed: the copies of the table it makes lose the triggers.
        migrations.RunPython(migrations.RunPython.noop, guard_sqlite_again),
        migrations.AddField(
            model_name="event", name="project_position", field=models.BigIntegerField(null=True)
        ),
        migrations.RunPython(number_existing_events, migrations.RunPython.noop),
        migrations.AlterField(model_name="event", name="project_position", field=models.BigIntegerField()),
        migrations.AddConstraint(
            model_name="event",
            constraint=models.UniqueConstraint(
                fields=("project_id", "project_position"), name="nexum_event_project_position"
            ),
        ),
        migrations.RunPython(guard_sqlite_again, migrations.RunPython.noop),
    ]
