"""A project's events are read on ``(project_id, project_position)`` (the unique index of migration 0004),
which orders them as their log positions do: the ``(project_id, position)`` index is one more index every
append maintains for nothing, so it goes."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("eventstore", "0005_drop_log_lock_function")]
    operations = [migrations.RemoveIndex(model_name="event", name="nexum_event_project_feed")]
