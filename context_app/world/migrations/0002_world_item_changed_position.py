"""``WorldItem.changed_position``: the log position of the last event that changed the row, indexed per goal.

Existing rows get the position of the last event that changed them (recording; verify, supersede or retract
for facts; a token count added in another encoding), which is exactly what the projection now writes.
"""

from django.db import migrations, models


def backfill(apps, schema_editor):
    WorldItem = apps.get_model("context_app", "WorldItem")
    Event = apps.get_model("eventstore", "Event")
    last_change: dict[str, int] = {}
    fact_changes = Event.objects.filter(event_type__in=["FactVerified", "FactSuperseded", "FactRetracted"])
    for position, data in fact_changes.values_list("position", "data").iterator(chunk_size=5000):
        fact_id = str(data.get("fact_id"))
        last_change[fact_id] = max(position, last_change.get(fact_id, 0))
    counts = Event.objects.filter(event_type="ItemTokensCounted")
    for position, data in counts.values_list("position", "data").iterator(chunk_size=5000):
        for item_id in data.get("counts", {}):
            last_change[str(item_id)] = max(position, last_change.get(str(item_id), 0))
    WorldItem.objects.update(changed_position=models.F("position"))
    for item_id, position in last_change.items():
        WorldItem.objects.filter(id=item_id, changed_position__lt=position).update(changed_position=position)


class Migration(migrations.Migration):
    dependencies = [
        ("context_app", "0001_world_items"),
        ("eventstore", "0002_append_only_triggers"),
    ]

    operations = [
        migrations.AddField(
            model_name="worlditem",
            name="changed_position",
            field=models.BigIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="worlditem",
            index=models.Index(fields=["goal_id", "changed_position"], name="world_item_changed"),
        ),
    ]
