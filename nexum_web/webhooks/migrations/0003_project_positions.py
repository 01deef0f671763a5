"""Webhook cursors and delivery ids become positions in the project's log (issue 26): each is mapped from the
whole-log position it held to the project's position of the same event (a cursor: of the project's last
event at or below it). Deliveries move to negative values first, so no two of a webhook's collide midway."""

from django.db import migrations, models

MAP_TO_PROJECT_POSITIONS = [
    """UPDATE webhooks_webhook SET cursor = COALESCE(
        (SELECT MAX(e.project_position) FROM nexum_event AS e
         WHERE e.project_id = webhooks_webhook.project_id AND e.position <= webhooks_webhook.cursor), 0)""",
    "UPDATE webhooks_webhookdelivery SET position = -position",
    """UPDATE webhooks_webhookdelivery SET position = COALESCE(
        (SELECT e.project_position FROM nexum_event AS e WHERE e.position = -webhooks_webhookdelivery.position),
        -position)""",
]


def map_to_project_positions(apps, schema_editor):
    for statement in MAP_TO_PROJECT_POSITIONS:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0002_attempt_recorded_first_and_due_per_project"),
        ("eventstore", "0004_project_position"),
    ]

    operations = [
        migrations.AlterField(
            model_name="webhook",
            name="cursor",
            field=models.BigIntegerField(
                default=0,
                help_text="position in the project's log up to which this webhook's deliveries are recorded",
            ),
        ),
        migrations.AlterField(
            model_name="webhookdelivery",
            name="position",
            field=models.BigIntegerField(
                help_text="the event's position in the project's log: its id for receivers"
            ),
        ),
        migrations.RunPython(map_to_project_positions, migrations.RunPython.noop),
    ]
