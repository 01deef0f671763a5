"""Read models of the context resolver, written only by projections (``projections.py``), plus the bundle
content store (``BundleContent``), which is not a read model.

``BundleContent`` keeps each bundle's canonical content by its digest, as the artifact store keeps artifact
bytes: the service writes it in the same transaction as the ``BundleResolved`` event that names the digest,
it is never changed (but for retention, which empties a bundle nothing reads any more and records a
``BundlePruned``), and a rebuild of the read models leaves it alone (events carry only the digest, R10).
Foreign keys carry no database constraint, like every read model's.
"""

from __future__ import annotations

from django.db import models

from nexum.core.resolution.events import REQUEST_STATUSES

STATE_CHOICES = [("open", "open"), ("resolved", "resolved")]
OUTCOME_CHOICES = [("retrieved", "retrieved"), ("failed", "failed"), ("denied", "denied")]


class Source(models.Model):
    """A source registered for a project (R1)."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=64)
    config = models.JSONField(default=dict)
    declared_scopes = models.JSONField(default=list)
    highest_trust = models.CharField(max_length=32)
    ttl_seconds = models.PositiveIntegerField(null=True, blank=True)
    track_revision = models.BooleanField(default=False)
    writable_by = models.CharField(max_length=16, default="operator")
    """Who can change the source's content (R4a): ``agent`` (inside the workspace) or ``operator``."""
    actor = models.CharField(max_length=200, blank=True)
    registered_at = models.DateTimeField()
    version = models.PositiveIntegerField()

    class Meta:
        ordering = ["project", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="resolution_source_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Grant(models.Model):
    """What the resolver may read for a goal (``task_id`` null) or one task (R2)."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    goal_id = models.UUIDField()
    task_id = models.UUIDField(null=True, blank=True)
    scopes = models.JSONField(default=dict, help_text="source name → granted scopes")
    expires_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    derived_from = models.JSONField(default=list)
    actor = models.CharField(max_length=200, blank=True)
    issued_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoke_reason = models.TextField(blank=True)
    version = models.PositiveIntegerField()

    class Meta:
        ordering = ["issued_at", "id"]
        indexes = [models.Index(fields=["project", "goal_id", "task_id"], name="resolution_grant_scope")]

    def __str__(self) -> str:
        return f"grant {self.id}"


class TaskQuestions(models.Model):
    """The required questions of a task's step (R7)."""

    task_id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    goal_id = models.UUIDField()
    questions = models.JSONField(default=list)
    actor = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField()
    version = models.PositiveIntegerField()

    class Meta:
        verbose_name_plural = "task questions"


class TaskContext(models.Model):
    """One per resolved task: the version of its ``context-<task_id>`` stream, its latest bundle, its open
    escalations and the operator's override, if any (what the plan gate reads, R9)."""

    task_id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    goal_id = models.UUIDField()
    version = models.PositiveIntegerField()
    latest_resolve_id = models.UUIDField(null=True, blank=True)
    latest_bundle_digest = models.CharField(max_length=64, blank=True)
    complete = models.BooleanField(null=True)
    stop_reason = models.CharField(max_length=32, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    override_resolve_id = models.UUIDField(null=True, blank=True)
    override_reason = models.TextField(blank=True)
    override_actor = models.CharField(max_length=200, blank=True)
    overridden_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    @property
    def overridden(self) -> bool:
        return self.override_resolve_id is not None and self.override_resolve_id == self.latest_resolve_id


class Resolve(models.Model):
    """One resolve of a task: the bundle it produced (retrieval history)."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    task_id = models.UUIDField()
    goal_id = models.UUIDField()
    bundle_digest = models.CharField(max_length=64)
    complete = models.BooleanField()
    stop_reason = models.CharField(max_length=32)
    risk = models.CharField(max_length=6)
    item_count = models.PositiveIntegerField()
    left_out_count = models.PositiveIntegerField()
    denial_count = models.PositiveIntegerField()
    source_error_count = models.PositiveIntegerField()
    tokens_used = models.PositiveIntegerField()
    escalation_ids = models.JSONField(default=list)
    actor = models.CharField(max_length=200, blank=True)
    position = models.BigIntegerField()
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["-position"]
        indexes = [
            models.Index(fields=["project", "task_id", "position"], name="resolution_resolve_task"),
            models.Index(fields=["project", "bundle_digest"], name="resolution_resolve_digest"),
        ]

    def __str__(self) -> str:
        return f"resolve {self.id}"


class ResolveRequest(models.Model):
    """One queued resolve and its outcome (the ``resolve-request-<id>`` stream): a kind of work dispatched to
    workers (``context_app.resolution.tasks.RESOLVE``). ``id`` is derived from the project and the caller's
    ``request_id`` (its ``Idempotency-Key``, or one made for it)."""

    id = models.UUIDField(primary_key=True)
    request_id = models.CharField(max_length=150)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    task_id = models.UUIDField()
    goal_id = models.UUIDField()
    status = models.CharField(max_length=8, choices=[(status, status) for status in REQUEST_STATUSES])
    resolve_id = models.UUIDField(null=True, blank=True)
    bundle_digest = models.CharField(max_length=64, blank=True)
    error = models.JSONField(null=True, blank=True)
    actor = models.CharField(max_length=200, blank=True)
    requested_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField()

    class Meta:
        ordering = ["-requested_at"]
        indexes = [
            # The dispatcher's and the dashboard's scan: a few queued rows among every resolve ever queued.
            models.Index(
                fields=["requested_at"], condition=models.Q(status="queued"), name="resolution_request_queued"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} ({self.status})"


class Retrieval(models.Model):
    """One retrieval or denial of a resolve (R2), keyed by the event's log position."""

    position = models.BigIntegerField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    resolve_id = models.UUIDField()
    task_id = models.UUIDField()
    source = models.CharField(max_length=200)
    scopes = models.JSONField(default=list)
    query = models.TextField(blank=True)
    outcome = models.CharField(max_length=10, choices=OUTCOME_CHOICES)
    code = models.CharField(max_length=64, blank=True)
    reason = models.TextField(blank=True)
    item_digests = models.JSONField(default=list)
    actor = models.CharField(max_length=200, blank=True)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["-position"]
        indexes = [models.Index(fields=["project", "task_id", "position"], name="resolution_retrieval_task")]


class BundleItem(models.Model):
    """An item of a resolved bundle, by provenance (its text is in the bundle content)."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    resolve_id = models.UUIDField()
    task_id = models.UUIDField()
    bundle_digest = models.CharField(max_length=64)
    ordinal = models.PositiveIntegerField()
    digest = models.CharField(max_length=64)
    source = models.CharField(max_length=200)
    locator = models.CharField(max_length=2000)
    trust_class = models.CharField(max_length=32)
    stale = models.BooleanField(default=False)
    conflict_group = models.CharField(max_length=64, blank=True)
    labels = models.JSONField(default=list)

    class Meta:
        ordering = ["resolve_id", "ordinal"]
        indexes = [
            models.Index(fields=["project", "digest"], name="resolution_item_digest"),
            models.Index(fields=["resolve_id", "ordinal"], name="resolution_item_resolve"),
        ]


class Escalation(models.Model):
    """A gap that matters, for a human (R5–R7): what is missing and why, the evidence on each side, and how
    it was resolved."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    task_id = models.UUIDField()
    goal_id = models.UUIDField()
    resolve_id = models.UUIDField()
    bundle_digest = models.CharField(max_length=64)
    key = models.CharField(max_length=64)
    kind = models.CharField(max_length=32)
    missing = models.TextField()
    why = models.TextField()
    subjects = models.JSONField(default=list)
    sources = models.JSONField(default=list)
    conflict_group = models.CharField(max_length=64, blank=True)
    evidence = models.JSONField(default=list)
    state = models.CharField(max_length=10, choices=STATE_CHOICES)
    resolution = models.CharField(max_length=32, blank=True)
    resolution_detail = models.JSONField(default=dict)
    resolution_reason = models.TextField(blank=True)
    resolved_by = models.CharField(max_length=200, blank=True)
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    position = models.BigIntegerField()

    class Meta:
        ordering = ["-position"]
        indexes = [
            models.Index(fields=["project", "state", "position"], name="resolution_escalation_state"),
            models.Index(fields=["project", "task_id", "state"], name="resolution_escalation_task"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.missing[:80]}"


class BundleContent(models.Model):
    """A bundle's canonical content, named by its digest (not a read model: see the module docstring)."""

    digest = models.CharField(max_length=64, primary_key=True)
    content = models.JSONField()
    size = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    pruned_at = models.DateTimeField(
        null=True, blank=True, help_text="when retention dropped the content (BundlePruned); the digest stays"
    )

    def __str__(self) -> str:
        return self.digest
