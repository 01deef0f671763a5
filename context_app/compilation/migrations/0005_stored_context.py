"""The stored model of a compiled context is named ``StoredContext`` (issue 14: ``CompiledContext`` is the core's
result). The table keeps its name: the first operation pins it (no change in the database), so the rename
changes only Django's state and the content type."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("compilation", "0004_compilation_queued_index"),
    ]

    operations = [
        migrations.AlterModelTable(name="compiledcontext", table="compilation_compiledcontext"),
        migrations.RenameModel(old_name="CompiledContext", new_name="StoredContext"),
    ]
