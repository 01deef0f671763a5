"""Read models of the world state (SPEC W1–W4). Written only by projections (projections.py).

One table holds every item kind: the columns shared by all kinds (scope, text, trust, token counts, relevance
terms, log position) plus the few kind-specific ones, so that the items of a task (its goal's and its own) are
one indexed query. Goal and task ids are plain UUIDs (the task graph's read models belong to tasks_app).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models

from nexum.core.ids import ITEM_VECTOR_IDS
from nexum.core.world.items import FACT_STATUSES, ITEM_KINDS

KIND_CHOICES = [(kind, kind.replace("_", " ")) for kind in ITEM_KINDS]
STATUS_CHOICES = [(status, status) for status in FACT_STATUSES]


class WorldItem(models.Model):
    """A fact, decision, failure, artifact, progress note or tool call.

    ``text`` is the item's main text (an artifact's summary, a tool call's result summary); ``rendered`` is
    the exact text the compiler shows (``nexum.core.world.items.render_item``) and ``token_counts`` its tokens
    per encoding. ``version`` is the item's stream version (facts change; other kinds stay at 1). ``position``
    is the log position of the event that recorded the item: higher is newer. ``changed_position`` is the log
    position of the last event that changed the row: the compiler reads only the rows of a goal that changed
    since its last compile, from an index that covers what it reads.
    """

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    goal_id = models.UUIDField()
    task_id = models.UUIDField(null=True, blank=True)
    kind = models.CharField(max_length=16, choices=KIND_CHOICES)
    text = models.TextField()
    rendered = models.TextField()
    token_counts = models.JSONField(default=dict)
    line_count = models.PositiveIntegerField(default=1)
    terms = models.JSONField(default=list)
    terms_text = models.TextField(default="", help_text="the terms joined by spaces: what the compiler reads")
    entities_text = models.TextField(
        default="",
        help_text="the named entities of a fact or tool call (nexum.core.world.entities), joined by spaces",
    )
    trust_class = models.CharField(max_length=32)
    source = models.CharField(max_length=500, blank=True)
    actor = models.CharField(max_length=200, blank=True)
    position = models.BigIntegerField()
    changed_position = models.BigIntegerField()
    recorded_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    version = models.PositiveIntegerField()
    forked_from = models.UUIDField(
        null=True, blank=True, help_text="the item this one was carried from by a fork (ItemsCarried)"
    )
    # facts
    subject = models.CharField(max_length=500, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    verified = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default="current")
    supersedes = models.UUIDField(null=True, blank=True)
    superseded_by = models.UUIDField(null=True, blank=True)
    # decisions, failures
    rationale = models.TextField(blank=True)
    attempt = models.PositiveIntegerField(null=True, blank=True)
    # artifacts
    uri = models.CharField(max_length=2000, blank=True)
    excerpt = models.TextField(blank=True)
    media_type = models.CharField(max_length=200, blank=True)
    content_sha256 = models.CharField(max_length=64, blank=True)
    content_size = models.BigIntegerField(null=True, blank=True)
    # tool calls
    tool = models.CharField(max_length=64, blank=True)
    arguments_digest = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["position"]
        indexes = [
            models.Index(fields=["project", "goal_id", "kind", "position"], name="world_item_goal"),
            models.Index(fields=["project", "task_id", "kind", "position"], name="world_item_task"),
            models.Index(fields=["project", "kind", "position"], name="world_item_kind"),
            # Covering (PostgreSQL): the compiler reads a goal's candidate metadata from the index alone, not
            # from heap rows that carry the texts.
            models.Index(
                fields=["goal_id", "changed_position"],
                name="world_item_candidates",
                include=[
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
                ],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"

    def tokens(self, encoding: str) -> int | None:
        return self.token_counts.get(encoding)


class ItemVector(models.Model):
    """A fact's or tool call's int8 vector by one embedder (``name@version``), computed when the item was
    stored. Kept per embedder: after a change of ``NEXUM_EMBEDDER`` the earlier vectors stay, so a context
    compiled under the earlier embedder still replays (until a rebuild, which embeds by the current one)."""

    id = models.UUIDField(primary_key=True)
    """``item_vector_id(item_id, embedder)``: one row per item and embedder."""
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    item_id = models.UUIDField()
    embedder = models.CharField(max_length=300)
    vector = models.BinaryField()

    class Meta:
        ordering = ["item_id", "embedder"]
        constraints = [
            models.UniqueConstraint(fields=["item_id", "embedder"], name="item_vector_per_embedder")
        ]

    def __str__(self) -> str:
        return f"vector of {self.item_id} by {self.embedder}"


def item_vector_id(item_id: Any, embedder: str) -> uuid.UUID:
    return uuid.uuid5(ITEM_VECTOR_IDS, f"{item_id}/{embedder}")


class Tool(models.Model):
    """A tool in a project's registry (name, description, JSON schema, pinned, optional score)."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True)
    schema = models.JSONField(default=dict)
    pinned = models.BooleanField(default=False)
    score = models.FloatField(null=True, blank=True)
    token_counts = models.JSONField(default=dict)
    terms = models.JSONField(default=list)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    version = models.PositiveIntegerField()

    class Meta:
        ordering = ["project", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="tool_name_per_project")]

    def __str__(self) -> str:
        return self.name


class ToolScope(models.Model):
    """How a goal or a task narrows (``allowed``; null: no narrowing) and pins the project's tools."""

    id = models.UUIDField(primary_key=True)
    """The goal's or task's id."""
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    goal_id = models.UUIDField()
    task_id = models.UUIDField(null=True, blank=True)
    allowed = models.JSONField(null=True, blank=True)
    pinned = models.JSONField(default=list)
    updated_at = models.DateTimeField()
    version = models.PositiveIntegerField()

    class Meta:
        ordering = ["project", "goal_id", "id"]

    def __str__(self) -> str:
        return f"tools of {self.id}"
