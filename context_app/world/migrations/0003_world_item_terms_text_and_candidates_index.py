"""``WorldItem.terms_text`` (the terms joined by spaces) and an index on ``(goal_id, changed_position)`` that
covers every column the compiler reads of a candidate (PostgreSQL; elsewhere a plain index), so a task's first
compile in a process reads a narrow index instead of heap rows that carry the texts."""

from django.db import migrations, models

INCLUDED = [
    "id",
    "task_id",
    "kind",
    "status",
    "position",
    "line_count",
    "verified",
    "trust_class",
    "source",
    "token_counts",
    "terms_text",
]


def backfill(apps, schema_editor):
    table = schema_editor.quote_name(apps.get_model("context_app", "WorldItem")._meta.db_table)
    if schema_editor.connection.vendor == "postgresql":
        terms = "array_to_string(ARRAY(SELECT jsonb_array_elements_text(terms)), ' ')"
    else:
        terms = "COALESCE((SELECT group_concat(value, ' ') FROM json_each(terms)), '')"
    schema_editor.execute(f"UPDATE {table} SET terms_text = {terms}")


class Migration(migrations.Migration):
    dependencies = [
        ("context_app", "0002_world_item_changed_position"),
    ]

    operations = [
        migrations.AddField(
            model_name="worlditem",
            name="terms_text",
            field=models.TextField(
                default="", help_text="the terms joined by spaces: what the compiler reads"
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.RemoveIndex(model_name="worlditem", name="world_item_changed"),
        migrations.AddIndex(
            model_name="worlditem",
            index=models.Index(
                fields=["goal_id", "changed_position"], name="world_item_candidates", include=INCLUDED
            ),
        ),
    ]
