from django.db import migrations, models


class Migration(migrations.Migration):
    """Tokens carry a role. Every token issued before roles existed was an agent's (the upcaster of
    ``AgentTokenIssued`` v1 says the same, so a rebuild gives the same rows)."""

    dependencies = [
        ("tasks_app", "0002_task_graph"),
    ]

    operations = [
        migrations.AddField(
            model_name="agenttoken",
            name="role",
            field=models.CharField(
                choices=[("agent", "agent"), ("operator", "operator")], default="agent", max_length=8
            ),
            preserve_default=False,
        ),
    ]
