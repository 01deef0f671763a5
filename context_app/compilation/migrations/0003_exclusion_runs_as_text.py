"""Exclusion runs stored as the canonical JSON text the digest covers. A context of a large world excludes
tens of thousands of items (megabytes of ids): parsing that into jsonb on every insert cost more than the
compile. On PostgreSQL the column is compressed with lz4 where the server has it (several times faster to
write than the default pglz)."""

from django.db import DatabaseError, migrations, models, transaction


def lz4_compression(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql" or connection.pg_version < 140000:
        return
    table = connection.ops.quote_name(apps.get_model("compilation", "CompiledContext")._meta.db_table)
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN exclusion_runs SET COMPRESSION lz4")
    except DatabaseError:  # a server built without lz4 keeps its default compression
        pass


class Migration(migrations.Migration):
    dependencies = [
        ("compilation", "0002_compaction_fold_task_index"),
    ]

    operations = [
        migrations.AlterField(
            model_name="compiledcontext",
            name="exclusion_runs",
            field=models.TextField(
                default="[]",
                help_text="the compiler's compact exclusion runs, as the canonical JSON the digest covers (a "
                "large text written once: stored as text, not parsed into jsonb)",
            ),
        ),
        migrations.RunPython(lz4_compression, migrations.RunPython.noop),
    ]
