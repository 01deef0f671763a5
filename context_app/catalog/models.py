"""Read models of the model catalog and its overlays. Written only by projections (``projections.py``).

Row keys are derived from (project, word) (``projections.word_row_id``), so a handler finds a word's row by
primary key. Foreign keys carry no database constraint, like every read model's.
"""

from __future__ import annotations

from django.db import models

from tasks_app.models import Project


class ModelCatalogHead(models.Model):
    """One per project with a catalog: the version of its ``models-<project_id>`` stream (the value a
    write's ``expected_version`` is decided on)."""

    project = models.OneToOneField(
        Project, primary_key=True, on_delete=models.CASCADE, related_name="model_catalog", db_constraint=False
    )
    version = models.PositiveIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "model catalog"

    def __str__(self) -> str:
        return f"{self.project_id} v{self.version}"


class CatalogCard(models.Model):
    """A model card (SPEC §5): a model word and the model it routes to, with its geometry and budget knobs."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="model_cards", db_constraint=False
    )
    word = models.CharField(max_length=100)
    model_id = models.CharField(max_length=200)
    tier = models.CharField(max_length=10)
    context_window = models.PositiveIntegerField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    capabilities = models.JSONField(default=list)
    latency_class = models.CharField(max_length=200, null=True, blank=True)
    encoding = models.CharField(max_length=200)
    preferred_context_tokens = models.PositiveIntegerField(null=True, blank=True)
    max_tool_count = models.PositiveIntegerField(null=True, blank=True)
    override_context_tokens = models.PositiveIntegerField(null=True, blank=True)
    override_tool_count = models.PositiveIntegerField(null=True, blank=True)
    safety_margin_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text="tokens held back from the window for what Nexum does not count"
    )
    safety_margin_percent = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="or: percent of the window less the output reserve held back"
    )
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["project", "word"]
        verbose_name = "model card"
        constraints = [models.UniqueConstraint(fields=["project", "word"], name="catalog_card_word")]

    def __str__(self) -> str:
        return self.word


class CatalogAlias(models.Model):
    """An alias or a tier word: a word that names another word (and so, at the end of the chain, a card)."""

    ALIAS = "alias"
    TIER = "tier"

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="model_aliases", db_constraint=False
    )
    word = models.CharField(max_length=100)
    target = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=[(ALIAS, "alias"), (TIER, "tier word")])
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["project", "word"]
        verbose_name = "alias or tier word"
        constraints = [models.UniqueConstraint(fields=["project", "word"], name="catalog_alias_word")]

    def __str__(self) -> str:
        return f"{self.word} → {self.target}"


class ModelOverlay(models.Model):
    """The overlay in force on one catalog word (SPEC O1): absent members mean "whatever the card says"."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="model_overlays", db_constraint=False
    )
    word = models.CharField(max_length=100)
    context_tokens = models.PositiveIntegerField(null=True, blank=True)
    auto_compact_tokens = models.PositiveIntegerField(null=True, blank=True)
    enabled = models.BooleanField(null=True, blank=True, help_text="compaction; empty: the request decides")
    updated_at = models.DateTimeField()
    updated_by = models.CharField(max_length=200)

    class Meta:
        ordering = ["project", "word"]
        verbose_name = "model overlay"
        constraints = [models.UniqueConstraint(fields=["project", "word"], name="model_overlay_word")]

    def __str__(self) -> str:
        return self.word


class ModelOverlayChange(models.Model):
    """The audit trail of overlays (SPEC O7): who changed which word's overlay when, from what to what.
    Keyed by the event's log position."""

    position = models.BigIntegerField(primary_key=True)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="model_overlay_changes", db_constraint=False
    )
    word = models.CharField(max_length=100)
    old = models.JSONField(null=True, blank=True)
    new = models.JSONField(null=True, blank=True)
    actor = models.CharField(max_length=200)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["-position"]
        verbose_name = "model overlay change"

    def __str__(self) -> str:
        return f"{self.word} @{self.position}"
