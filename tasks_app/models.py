"""Read models of the task graph. Written only by projections (tasks_app/projections.py).

Foreign keys between read models carry no database constraint (``db_constraint=False``): read models are
derived from the log, which is the source of truth, and a rebuild writes tens of thousands of rows at a time
without a per-row constraint check.
"""

from __future__ import annotations

from django.db import models


class Project(models.Model):
    """The tenant (SPEC T0): goals, sources, grants, tokens and model catalogs belong to one project."""

    id = models.UUIDField(primary_key=True)
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField()
    version = models.PositiveIntegerField()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class AgentToken(models.Model):
    """An agent's API credential. Only the sha256 of the key is kept."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="agent_tokens", db_constraint=False
    )
    name = models.CharField(max_length=100)
    key_prefix = models.CharField(max_length=16)
    key_sha256 = models.CharField(max_length=64, unique=True)
    issued_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="agent_token_name_per_project")
        ]

    def __str__(self) -> str:
        return f"{self.project_id}:{self.name}"
