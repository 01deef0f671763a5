"""Vectors per item and embedder (``ItemVector``) and the named entities of facts and tool calls
(``WorldItem.entities_text``, computed here from the stored text of the rows already there; their vectors are
filled by ``manage.py nexum_embed`` or by the first compile that meets them). The candidates index covers the
entities too."""

import django.db.models.deletion
from django.db import migrations, models

from nexum.core.world.entities import entities_of
from nexum.core.world.items import MEANING_KINDS, meaning_text

BATCH = 2000


def entities_of_stored_rows(apps, schema_editor):
    items = apps.get_model("context_app", "WorldItem")
    changed = []
    rows = items.objects.filter(kind__in=MEANING_KINDS).values_list(
        "id", "kind", "text", "subject", "tool", "arguments_digest"
    )
    for item_id, kind, text, subject, tool, arguments_digest in rows.iterator(chunk_size=BATCH):
        fields = {"text": text, "subject": subject, "tool": tool, "arguments_digest": arguments_digest}
        found = " ".join(entities_of(meaning_text(kind, fields) or ""))
        if found:
            changed.append(items(id=item_id, entities_text=found))
        if len(changed) >= BATCH:
            items.objects.bulk_update(changed, ["entities_text"])
            changed.clear()
    if changed:
        items.objects.bulk_update(changed, ["entities_text"])


class Migration(migrations.Migration):
    dependencies = [
        ("context_app", "0003_world_item_terms_text_and_candidates_index"),
        ("tasks_app", "0003_agent_token_role"),
    ]

    operations = [
        migrations.CreateModel(
            name="ItemVector",
            fields=[
                ("id", models.UUIDField(primary_key=True, serialize=False)),
                ("item_id", models.UUIDField()),
                ("embedder", models.CharField(max_length=300)),
                ("vector", models.BinaryField()),
            ],
            options={
                "ordering": ["item_id", "embedder"],
            },
        ),
        migrations.RemoveIndex(
            model_name="worlditem",
            name="world_item_candidates",
        ),
        migrations.AddField(
            model_name="worlditem",
            name="entities_text",
            field=models.TextField(
                default="",
                help_text="the named entities of a fact or tool call (nexum.core.world.entities), joined by spaces",
            ),
        ),
        migrations.RunPython(entities_of_stored_rows, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="worlditem",
            index=models.Index(
                fields=["goal_id", "changed_position"],
                include=(
                    "id",
                    "task_id",
                    "kind",
                    "status",
                    "position",
                    "line_count",
                    "verified",
                    "trust_class",
                    "source",
                    "token_counts",
                    "terms_text",
                    "entities_text",
                ),
                name="world_item_candidates",
            ),
        ),
        migrations.AddField(
            model_name="itemvector",
            name="project",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="tasks_app.project",
            ),
        ),
        migrations.AddConstraint(
            model_name="itemvector",
            constraint=models.UniqueConstraint(
                fields=("item_id", "embedder"), name="item_vector_per_embedder"
            ),
        ),
    ]
