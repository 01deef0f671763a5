"""A project's own relevance floor (issue 24 item 3): empty for every project until an operator sets one."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tasks_app", "0003_agent_token_role"),
    ]

    operations = [
        migrations.AddField(
            model_name="project",
            name="relevance_floor",
            field=models.FloatField(
                blank=True,
                help_text="the project's relevance floor for its compiles (0 to 1; 0: no floor); empty: the service's NEXUM_RELEVANCE_FLOOR",
                null=True,
            ),
        ),
    ]
