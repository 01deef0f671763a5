"""Read models of the verification gate (SPEC V). Written only by ``verification_app.projections``.

Check output and the model's answer are content: they live in the artifact store, named here by sha256
(``output_sha256``, ``answer_sha256``); selectors and the admin read them from there.
"""

from __future__ import annotations

from django.db import models

import nexum.core.verification.contracts  # noqa: F401  (registers the event types)
from nexum.core.verification.approvals import APPROVAL_STATES  # (and registers the approval event types)
from tasks_app.models import Project, Task

OUTCOME_CHOICES = [(o, o) for o in ("completed", "failed", "blocked", "skipped")]


class Contract(models.Model):
    """A task's current verification contract (the latest ``ContractRegistered``)."""

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.DO_NOTHING, related_name="contract", db_constraint=False
    )
    project = models.ForeignKey(
        Project, on_delete=models.DO_NOTHING, related_name="contracts", db_constraint=False
    )
    goal_id = models.UUIDField()
    revision = models.PositiveIntegerField(help_text="the contract stream's version")
    checks = models.JSONField(default=list)
    require_checks = models.BooleanField(default=True)
    on_failure = models.CharField(max_length=16)
    approval = models.CharField(
        max_length=16,
        null=True,
        blank=True,
        help_text="before_start, before_complete or none; empty: the project's default for high-risk tasks",
    )
    trust_class = models.CharField(max_length=32)
    derived_from = models.JSONField(default=list)
    reason = models.TextField(blank=True)
    actor = models.CharField(max_length=200)
    registered_at = models.DateTimeField()
    position = models.BigIntegerField()

    class Meta:
        ordering = ["project", "goal_id", "task"]

    def __str__(self) -> str:
        return f"contract of {self.task_id} (revision {self.revision})"


class CompletionRequest(models.Model):
    """One completion request of a task and, once decided, the gate's decision on it."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        Project, on_delete=models.DO_NOTHING, related_name="completion_requests", db_constraint=False
    )
    task = models.ForeignKey(
        Task, on_delete=models.DO_NOTHING, related_name="completion_requests", db_constraint=False
    )
    goal_id = models.UUIDField()
    task_version = models.PositiveIntegerField(help_text="the task version the request was made at")
    attempt = models.PositiveIntegerField()
    contract_revision = models.PositiveIntegerField(help_text="0: no contract was registered")
    answer_sha256 = models.CharField(max_length=64)
    answer_bytes = models.PositiveIntegerField()
    actor = models.CharField(max_length=200)
    requested_at = models.DateTimeField()
    decided = models.BooleanField(default=False)
    outcome = models.CharField(max_length=16, blank=True, choices=OUTCOME_CHOICES)
    reason = models.TextField(blank=True)
    failing_checks = models.JSONField(default=list)
    decided_at = models.DateTimeField(null=True, blank=True)
    position = models.BigIntegerField(help_text="log position of the request")
    version = models.PositiveIntegerField(help_text="the request stream's version")

    class Meta:
        ordering = ["-position"]
        indexes = [
            models.Index(fields=["task", "position"], name="completion_task_position"),
            # The dispatcher's and the dashboard's scan: a few pending rows among every request ever made.
            models.Index(
                fields=["requested_at"], condition=models.Q(decided=False), name="completion_pending"
            ),
        ]
        verbose_name = "gate decision"

    def __str__(self) -> str:
        return f"completion {self.id} ({self.outcome or 'pending'})"


class CheckRun(models.Model):
    """One check's run for one request (its id is derived from the request id and the check name)."""

    id = models.UUIDField(primary_key=True)
    request = models.ForeignKey(
        CompletionRequest, on_delete=models.DO_NOTHING, related_name="check_runs", db_constraint=False
    )
    project = models.ForeignKey(
        Project, on_delete=models.DO_NOTHING, related_name="check_runs", db_constraint=False
    )
    task_id = models.UUIDField()
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=32)
    ordinal = models.PositiveIntegerField()
    passed = models.BooleanField()
    reason = models.CharField(max_length=32)
    exit_code = models.IntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField()
    output_sha256 = models.CharField(max_length=64)
    output_bytes = models.PositiveIntegerField()
    truncated = models.BooleanField()
    argv = models.JSONField(default=list)
    cwd = models.CharField(max_length=4096, blank=True)
    actor = models.CharField(max_length=200)
    recorded_at = models.DateTimeField()
    position = models.BigIntegerField()

    class Meta:
        ordering = ["request", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["request", "name"], name="check_run_per_request")]

    def __str__(self) -> str:
        return f"{self.name}: {self.reason}"


APPROVAL_STATE_CHOICES = [(state, state) for state in APPROVAL_STATES]


class Approval(models.Model):
    """One approval: asked for by the gate or an agent (``ApprovalRequested``), then granted or denied by an
    operator with a reason (``ApprovalGranted`` / ``ApprovalDenied``)."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        Project, on_delete=models.DO_NOTHING, related_name="approvals", db_constraint=False
    )
    task = models.ForeignKey(Task, on_delete=models.DO_NOTHING, related_name="approvals", db_constraint=False)
    goal_id = models.UUIDField()
    action = models.CharField(
        max_length=100, help_text="start or complete (the gate's), else the agent's own"
    )
    arguments_digest = models.CharField(
        max_length=64, blank=True, help_text="sha256 of the action's arguments"
    )
    attempt = models.PositiveIntegerField(help_text="the task attempt the approval is for")
    stage = models.CharField(max_length=16, blank=True, help_text="the gate stage it holds; empty: an action")
    reason = models.TextField(blank=True, help_text="why it was asked")
    state = models.CharField(max_length=16, choices=APPROVAL_STATE_CHOICES)
    decision_reason = models.TextField(blank=True)
    requested_by = models.CharField(max_length=200)
    decided_by = models.CharField(max_length=200, blank=True)
    requested_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    position = models.BigIntegerField(help_text="log position of the request")
    version = models.PositiveIntegerField(help_text="the approval stream's version")

    class Meta:
        ordering = ["-position"]
        indexes = [
            models.Index(fields=["task", "action", "attempt", "position"], name="approval_task_action"),
            models.Index(fields=["project", "state", "position"], name="approval_project_state"),
        ]

    def __str__(self) -> str:
        return f"approval {self.id} of {self.action} ({self.state})"
