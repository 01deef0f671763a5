"""Every row knows its project (issue 26): an open stream's lease carries its token's project, filled for
the leases open now (one whose token is gone counts for nothing and is removed)."""

from django.db import migrations, models

FILL = """UPDATE nexum_web_eventstreamlease SET project_id = (
    SELECT t.project_id FROM tasks_app_agenttoken AS t WHERE t.id = nexum_web_eventstreamlease.token_id)"""


def fill(apps, schema_editor):
    schema_editor.execute(FILL, params=None)
    schema_editor.execute("DELETE FROM nexum_web_eventstreamlease WHERE project_id IS NULL", params=None)


class Migration(migrations.Migration):
    dependencies = [("nexum_web", "0001_initial"), ("tasks_app", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="eventstreamlease", name="project_id", field=models.UUIDField(null=True)
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="eventstreamlease",
            name="project_id",
            field=models.UUIDField(help_text="the token's project"),
        ),
    ]
