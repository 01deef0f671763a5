"""Compiled contexts (SPEC C8, C10–C12).

Two kinds of tables live here:

* Content-addressed storage, written by the compile service in the transaction that appends the
  ``ContextCompiled`` event, never cleared by a rebuild (like the artifact store): ``StoredContext`` (a
  compiled context, stored once per project and digest) and ``CompileEvidence`` (the extra evidence a compile
  request supplied, kept by digest so a replay can use it again). Events name their rows by digest only.
* Retention's operational rows: ``RetentionRun`` (one pass of a project's policy, the work kind the
  dispatcher sends).
* Read models written by ``projections.RetentionProjection``: ``PrunedContent`` (what retention pruned, by
  digest: the list an export gives).
* Read models written by ``projections.CompilationProjection`` from the log: ``ContextCompilation`` (one row
  per compile request: the per-task compile history and the status an asynchronous caller polls),
  ``CompactionFold`` and ``FoldedItem`` (which progress notes and tool calls were folded into a summary).
"""

from __future__ import annotations

from django.db import models


class StoredContext(models.Model):
    """One compiled context, content-addressed: ``digest`` covers everything the compiler produced (the
    prompt block, tools, inclusions, exclusions, truncations, token counts, budget and encoding).
    ``position``, ``model_word``, ``task_id`` and ``request_id`` are those of the first compile
    that produced it."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    digest = models.CharField(max_length=64)
    task_id = models.UUIDField()
    goal_id = models.UUIDField()
    request_id = models.UUIDField()
    model_word = models.CharField(max_length=100)
    encoding = models.CharField(max_length=200)
    position = models.BigIntegerField(help_text="the log position the context was compiled at")
    budget = models.JSONField()
    bundle_digest = models.CharField(max_length=200, blank=True)
    evidence_digest = models.CharField(max_length=64, blank=True)
    prompt_block = models.TextField()
    tools = models.JSONField(default=list)
    included = models.JSONField(default=list, help_text="[kind, id] pairs in block order")
    exclusion_runs = models.TextField(
        default="[]",
        help_text="the compiler's compact exclusion runs, as the canonical JSON the digest covers (a large "
        "text written once: stored as text, not parsed into jsonb)",
    )
    excluded_count = models.PositiveIntegerField(default=0)
    truncated = models.JSONField(default=list)
    section_tokens = models.JSONField(default=dict)
    prompt_tokens = models.PositiveIntegerField()
    tool_tokens = models.PositiveIntegerField()
    compiler_version = models.PositiveIntegerField()
    embedder = models.CharField(
        max_length=300,
        blank=True,
        default="",
        db_default="",  # rows written by a process still on the previous release get it too
        help_text="name@version of the embedder the compile ranked by; empty: by words alone",
    )
    stored_at = models.DateTimeField()
    pruned_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="when retention dropped the prompt block and exclusion runs (ContextPruned): a read "
        "recompiles them at the position and verifies the digest",
    )

    class Meta:
        db_table = "compilation_compiledcontext"  # the table's name from before the model was renamed
        ordering = ["-position", "digest"]
        verbose_name = "compiled context"
        constraints = [
            models.UniqueConstraint(fields=["project", "digest"], name="compiled_context_digest"),
        ]
        indexes = [models.Index(fields=["project", "task_id", "position"], name="compiled_context_task")]

    def __str__(self) -> str:
        return self.digest[:16]

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.tool_tokens


class CompileEvidence(models.Model):
    """The extra evidence one or more compile requests supplied, or a request's focus (``[{"focus": text}]``),
    content-addressed by ``digest``: events name it by digest and carry no text."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    digest = models.CharField(max_length=64)
    items = models.JSONField()
    stored_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "digest"], name="compile_evidence_digest"),
        ]

    def __str__(self) -> str:
        return self.digest[:16]


STATUS_CHOICES = [(status, status) for status in ("queued", "done", "failed")]


class ContextCompilation(models.Model):
    """One compile request and its outcome (the ``compile-<request_id>`` stream)."""

    request_id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    task_id = models.UUIDField()
    goal_id = models.UUIDField()
    status = models.CharField(max_length=8, choices=STATUS_CHOICES)
    model_word = models.CharField(max_length=100)
    overrides = models.JSONField(default=dict)
    compaction = models.BooleanField(null=True, blank=True)
    evidence_digest = models.CharField(max_length=64, blank=True)
    focus_digest = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",  # rows written by a process still on the previous release get it too
        help_text="the request's focus, kept with the request evidence",
    )
    digest = models.CharField(max_length=64, blank=True)
    embedder = models.CharField(
        max_length=300,
        blank=True,
        default="",
        db_default="",
        help_text="name@version of the embedder the compile ranked by; empty: by words alone",
    )
    position = models.BigIntegerField(null=True, blank=True, help_text="the log position compiled at")
    compiled_position = models.BigIntegerField(
        null=True, blank=True, help_text="the log position of the ContextCompiled event"
    )
    budget = models.JSONField(default=dict)
    encoding = models.CharField(max_length=200, blank=True)
    bundle_digest = models.CharField(max_length=200, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    tool_tokens = models.PositiveIntegerField(null=True, blank=True)
    included_count = models.PositiveIntegerField(null=True, blank=True)
    excluded_count = models.PositiveIntegerField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    actor = models.CharField(max_length=200, blank=True)
    requested_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField()

    class Meta:
        ordering = ["-requested_at"]
        verbose_name = "compile"
        indexes = [
            models.Index(fields=["task_id", "compiled_position"], name="compilation_task"),
            # The dispatcher's and the dashboard's scan: a few queued rows among every compile ever made.
            models.Index(
                fields=["requested_at"], condition=models.Q(status="queued"), name="compilation_queued"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} ({self.status})"


class CompactionFold(models.Model):
    """Progress notes and tool calls of a task folded into one summary item (SPEC C11)."""

    fold_id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    task_id = models.UUIDField()
    goal_id = models.UUIDField()
    summary_id = models.UUIDField()
    folded_ids = models.JSONField()
    folded_tokens = models.PositiveIntegerField()
    threshold = models.PositiveIntegerField()
    encoding = models.CharField(max_length=200)
    summarizer = models.CharField(max_length=300)
    position = models.BigIntegerField()
    actor = models.CharField(max_length=200, blank=True)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["position"]
        verbose_name = "compaction fold"
        indexes = [models.Index(fields=["task_id", "position"], name="compaction_fold_task")]

    def __str__(self) -> str:
        return f"fold {self.fold_id}"


class FoldedItem(models.Model):
    """An item folded into a summary: the compiler leaves it out (the item itself stays readable)."""

    item_id = models.UUIDField(primary_key=True)
    fold = models.ForeignKey(
        CompactionFold, on_delete=models.DO_NOTHING, related_name="items", db_constraint=False
    )
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    task_id = models.UUIDField()

    class Meta:
        indexes = [models.Index(fields=["task_id"], name="folded_item_task")]

    def __str__(self) -> str:
        return str(self.item_id)


class ContextUsage(models.Model):
    """One model call's usage as the provider reported it (issue 28), against Nexum's count of the context
    it was made with: a read model of ``ContextUsageReported``, one row per report."""

    usage_id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    digest = models.CharField(max_length=64)
    task_id = models.UUIDField()
    goal_id = models.UUIDField()
    model_word = models.CharField(max_length=100, help_text="the word the context was compiled under")
    card_word = models.CharField(max_length=100, help_text="the card that word resolved to when reported")
    nexum_tokens = models.PositiveIntegerField(help_text="Nexum's count: prompt block plus tool schemas")
    provider = models.CharField(max_length=200)
    provider_model = models.CharField(max_length=200, help_text="the model the provider says answered")
    prompt_tokens = models.PositiveIntegerField(help_text="the provider's prompt tokens")
    completion_tokens = models.PositiveIntegerField()
    cost = models.DecimalField(max_digits=24, decimal_places=10, null=True, blank=True)
    drift = models.FloatField(null=True, blank=True, help_text="(provider - nexum) / nexum")
    position = models.BigIntegerField(help_text="the log position of the report")
    actor = models.CharField(max_length=200)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["-position"]
        verbose_name = "context usage"
        verbose_name_plural = "context usage"
        indexes = [
            models.Index(fields=["project", "card_word", "position"], name="context_usage_card"),
            models.Index(fields=["task_id"], name="context_usage_task"),
            models.Index(fields=["goal_id"], name="context_usage_goal"),
        ]

    def __str__(self) -> str:
        return f"{self.digest[:16]} {self.provider}/{self.provider_model}"


PRUNED_KIND_CHOICES = [(kind, kind) for kind in ("contexts", "bundles", "check_output")]


class PrunedContent(models.Model):
    """Stored content retention pruned (``ContextPruned``, ``BundlePruned``, ``CheckOutputPruned``): its
    digest, how many bytes it freed and the log position of the prune."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    kind = models.CharField(max_length=16, choices=PRUNED_KIND_CHOICES)
    digest = models.CharField(max_length=64)
    bytes_freed = models.PositiveBigIntegerField()
    position = models.BigIntegerField(help_text="the log position of the prune event")
    pruned_at = models.DateTimeField()

    class Meta:
        ordering = ["position"]
        verbose_name = "pruned content"
        verbose_name_plural = "pruned content"
        indexes = [models.Index(fields=["project", "kind", "digest"], name="pruned_content_digest")]

    def __str__(self) -> str:
        return f"{self.kind} {self.digest[:16]}"


RETENTION_PENDING = "pending"
RETENTION_DONE = "done"
RETENTION_STATES = [(state, state) for state in (RETENTION_PENDING, RETENTION_DONE)]


class RetentionRun(models.Model):
    """One run of a project's retention policy, recorded by the dispatcher's pass when the last one is
    ``NEXUM_RETENTION_INTERVAL_S`` old and run by a worker under its lease (operational state, not a read
    model: what it pruned is in the log)."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        "tasks_app.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    task_id = models.UUIDField(null=True, blank=True, help_text="unused: work kinds list one")
    state = models.CharField(max_length=8, choices=RETENTION_STATES, default=RETENTION_PENDING)
    requested_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    pruned = models.PositiveIntegerField(default=0, help_text="contexts, bundles and outputs pruned")
    bytes_freed = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-requested_at"]
        indexes = [models.Index(fields=["project", "requested_at"], name="retention_run_project")]

    def __str__(self) -> str:
        return f"retention {self.id} ({self.state})"
