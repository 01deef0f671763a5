"""Each event gets its place in its project's hash chain (issue 27): ``previous_hash`` and ``event_hash``
(``nexum.core.chain``), computed for the existing events project by project in project-position order; and
the table where ``nexum_verify_log`` records its runs.

As in migration 0004, the log's UPDATE guard is lifted for the statements that fill the new columns and put
back in the same transaction (PostgreSQL: the row trigger disabled and enabled by the owner; SQLite: the
triggers dropped, and made again at the end on the table the column changes copied).
"""

import importlib

from django.db import migrations, models

from nexum.core import chain

APPEND_ONLY = importlib.import_module("nexum.eventstore.migrations.0002_append_only_triggers")
COLUMNS = (
    "position",
    "stream_id",
    "event_type",
    "schema_version",
    "data",
    "metadata",
    "project_id",
    "project_position",
    "recorded_at",
)


def chain_existing_events(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute("ALTER TABLE nexum_event DISABLE TRIGGER nexum_event_no_update_or_delete")
    elif vendor == "sqlite":
        for statement in APPEND_ONLY.SQLITE_BACKWARD:
            schema_editor.execute(statement, params=None)
    else:
        raise RuntimeError(f"Nexum supports PostgreSQL and SQLite, not {vendor}")
    event = apps.get_model("eventstore", "Event")
    hashes = []
    previous_by_project: dict[object, str] = {}
    rows = event.objects.order_by("project_id", "project_position").values_list(*COLUMNS)
    for (
        position,
        stream_id,
        name,
        schema_version,
        data,
        metadata,
        project,
        place,
        recorded_at,
    ) in rows.iterator(chunk_size=2000):
        previous = previous_by_project.get(project, chain.GENESIS)
        own = chain.event_hash(
            previous_hash=previous,
            stream_id=stream_id,
            event_type=name,
            schema_version=schema_version,
            data=data,
            metadata=metadata,
            project_id=str(project) if project is not None else None,
            project_position=place,
            recorded_at=recorded_at,
        )
        previous_by_project[project] = own
        hashes.append((previous, own, position))
    with schema_editor.connection.cursor() as cursor:
        cursor.executemany(
            "UPDATE nexum_event SET previous_hash = %s, event_hash = %s WHERE position = %s", hashes
        )
    if vendor == "postgresql":
        schema_editor.execute("ALTER TABLE nexum_event ENABLE TRIGGER nexum_event_no_update_or_delete")


def guard_sqlite_again(apps, schema_editor):
    """SQLite: the append-only triggers again, on the table the previous operations copied."""
    if schema_editor.connection.vendor == "sqlite":
        for statement in [*APPEND_ONLY.SQLITE_BACKWARD, *APPEND_ONLY.SQLITE_FORWARD]:
            schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("eventstore", "0006_project_position_index_serves_the_feed")]
    operations = [
        # Undone last when the migration is reversed: the copies of the table it makes lose the triggers.
        migrations.RunPython(migrations.RunPython.noop, guard_sqlite_again),
        migrations.AddField(
            model_name="event", name="previous_hash", field=models.CharField(max_length=64, null=True)
        ),
        migrations.AddField(
            model_name="event", name="event_hash", field=models.CharField(max_length=64, null=True)
        ),
        migrations.RunPython(chain_existing_events, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="event",
            name="previous_hash",
            field=models.CharField(
                help_text="the hash of the project's event before this one", max_length=64
            ),
        ),
        migrations.AlterField(
            model_name="event",
            name="event_hash",
            field=models.CharField(
                help_text="sha256 of this event's content and previous_hash (nexum.core.chain)", max_length=64
            ),
        ),
        migrations.RunPython(guard_sqlite_again, migrations.RunPython.noop),
        migrations.CreateModel(
            name="LogVerification",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("started_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField()),
                (
                    "project_id",
                    models.UUIDField(
                        blank=True, help_text="the project verified; empty: every one", null=True
                    ),
                ),
                ("projects", models.PositiveIntegerField(help_text="how many projects' logs were walked")),
                ("events", models.PositiveBigIntegerField(help_text="how many events were checked")),
                ("ok", models.BooleanField()),
                ("broken_position", models.BigIntegerField(blank=True, null=True)),
                ("broken_project_id", models.UUIDField(blank=True, null=True)),
                ("broken_project_position", models.BigIntegerField(blank=True, null=True)),
                ("broken_event_type", models.CharField(blank=True, max_length=100)),
                ("message", models.TextField(blank=True)),
            ],
            options={"db_table": "nexum_log_verification", "ordering": ["-finished_at"]},
        ),
    ]
