"""Every row knows its project (issue 26): a row of work in flight carries its request's project, filled
for the rows in flight now from each kind's request table."""

from django.db import migrations, models

REQUEST_TABLES = {
    "completion": ("verification_app_completionrequest", "id"),
    "compile": ("compilation_contextcompilation", "request_id"),
    "webhook": ("webhooks_webhookdelivery", "id"),
}


def fill(apps, schema_editor):
    for kind, (table, id_column) in REQUEST_TABLES.items():
        schema_editor.execute(
            f"UPDATE work_work SET project_id = (SELECT r.project_id FROM {table} AS r"
            f" WHERE r.{id_column} = work_work.request_id) WHERE kind = %s",
            params=[kind],
        )


class Migration(migrations.Migration):
    dependencies = [
        ("work", "0001_work_in_flight"),
        ("verification_app", "0002_completion_pending_index"),
        ("compilation", "0006_compile_request_focus"),
        ("webhooks", "0004_attempt_project"),
    ]

    operations = [
        migrations.AddField(
            model_name="work",
            name="project_id",
            field=models.UUIDField(blank=True, null=True, help_text="the request's project"),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
