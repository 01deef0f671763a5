"""A project's events are read on ``(project_id, project_position)`` (the unique index of migration 0004),
which orders them as their log positions do: the ``(project_id, position)`` index is one more index every
append maintains for nothing, so it goes. The events without a project get a unique index of their own on
``project_position`` (NULLs are distinct in the other): their places stay unique, and their log's head is one
probe of it (on the other index, a planner with stale statistics read every such event to find it)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("eventstore", "0005_drop_log_lock_function")]
    operations = [
        migrations.RemoveIndex(model_name="event", name="nexum_event_project_feed"),
        migrations.AddConstraint(
            model_name="event",
            constraint=models.UniqueConstraint(
                condition=models.Q(project_id__isnull=True),
                fields=("project_position",),
                name="nexum_event_no_project_position",
            ),
        ),
    ]
