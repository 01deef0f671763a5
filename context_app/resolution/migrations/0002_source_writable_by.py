"""Who can write a source (SPEC R4a): ``agent`` for one inside the workspace, else ``operator``."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("resolution", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="source",
            name="writable_by",
            field=models.CharField(default="operator", max_length=16),
        ),
    ]
