"""The embedder a compile ranked by (name@version), on the stored context and the compile's record; empty for
every compile before embedders."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("compilation", "0006_compile_request_focus"),
    ]

    operations = [
        migrations.AddField(
            model_name="contextcompilation",
            name="embedder",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="name@version of the embedder the compile ranked by; empty: by words alone",
                max_length=300,
            ),
        ),
        migrations.AddField(
            model_name="storedcontext",
            name="embedder",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="name@version of the embedder the compile ranked by; empty: by words alone",
                max_length=300,
            ),
        ),
    ]
