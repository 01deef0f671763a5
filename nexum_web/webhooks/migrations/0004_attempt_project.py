"""Every row knows its project (issue 26): an attempt carries its delivery's project, filled for the
attempts already recorded."""

from django.db import migrations, models

FILL = """UPDATE webhooks_webhookattempt SET project_id = (
    SELECT d.project_id FROM webhooks_webhookdelivery AS d WHERE d.id = webhooks_webhookattempt.delivery_id)"""


def fill(apps, schema_editor):
    schema_editor.execute(FILL, params=None)


class Migration(migrations.Migration):
    dependencies = [("webhooks", "0003_project_positions")]

    operations = [
        migrations.AddField(
            model_name="webhookattempt", name="project_id", field=models.UUIDField(null=True)
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="webhookattempt",
            name="project_id",
            field=models.UUIDField(help_text="the delivery's project: every row knows its project"),
        ),
    ]
