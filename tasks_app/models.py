"""Read models of the task graph. Written only by projections (tasks_app/projections.py).

Foreign keys between read models carry no database constraint (``db_constraint=False``): read models are
derived from the log, which is the source of truth, and a rebuild writes tens of thousands of rows at a time
without a per-row constraint check.
"""

from __future__ import annotations

from django.db import models

from nexum.core.roles import ROLES


class Project(models.Model):
    """The tenant (SPEC T0): goals, sources, grants, tokens and model catalogs belong to one project."""

    id = models.UUIDField(primary_key=True)
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    relevance_floor = models.FloatField(
        null=True,
        blank=True,
        help_text="the project's relevance floor for its compiles (0 to 1; 0: no floor); empty: the "
        "service's NEXUM_RELEVANCE_FLOOR",
    )
    high_risk_approval = models.CharField(
        max_length=16,
        null=True,
        blank=True,
        help_text="the stage a high-risk task whose contract says nothing waits at for an operator's "
        "approval (before_start or before_complete); empty: none",
    )
    retention_context_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="days to keep stored compiled contexts; empty: the service's default"
    )
    retention_bundle_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="days to keep bundles; empty: the service's default"
    )
    retention_check_output_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="days to keep check output; empty: the service's default"
    )
    created_at = models.DateTimeField()
    version = models.PositiveIntegerField()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


ROLE_CHOICES = [(role, role) for role in ROLES]


class AgentToken(models.Model):
    """An API credential of an agent or an operator (``role``, ``nexum.core.roles``). Only the sha256 of the
    key is kept."""

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="agent_tokens", db_constraint=False
    )
    name = models.CharField(max_length=100)
    key_prefix = models.CharField(max_length=16)
    key_sha256 = models.CharField(max_length=64, unique=True)
    role = models.CharField(max_length=8, choices=ROLE_CHOICES)
    issued_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="agent_token_name_per_project")
        ]

    def __str__(self) -> str:
        return f"{self.project_id}:{self.name}"


RISK_CHOICES = [(risk, risk) for risk in ("low", "medium", "high")]
STATE_CHOICES = [
    (state, state) for state in ("pending", "running", "completed", "failed", "blocked", "cancelled")
]


class Task(models.Model):
    """A goal or one of its tasks (SPEC T1–T3). A goal is the root task of its plan (``is_goal``).

    ``goal`` is the root goal for every row, the goal itself included (it points to itself), so
    ``task.goal_id`` always names the plan a task belongs to. ``parent`` is the task a step refines (the goal
    for top-level steps, None for the goal). ``depends_on`` holds keys of tasks in the same goal.

    A task's ``state`` follows its lifecycle (``nexum/core/tasks/lifecycle.py``); a goal's ``state`` is
    derived from its tasks' states (``progress`` counts them by state) and no command changes it directly.
    ``version`` is the version of the row's own stream (``task-<id>``, or ``goal-<id>`` for a goal) after the
    last event applied: pass it back as ``expected_version``.
    """

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tasks", db_constraint=False)
    goal = models.ForeignKey("self", on_delete=models.CASCADE, related_name="plan_tasks", db_constraint=False)
    parent = models.ForeignKey(
        "self", on_delete=models.CASCADE, related_name="children", null=True, blank=True, db_constraint=False
    )
    key = models.CharField(
        max_length=64, blank=True, help_text="the task's key within its goal; '' for a goal"
    )
    ordinal = models.PositiveIntegerField(help_text="position in the goal's plan; 0 for the goal")
    is_goal = models.BooleanField()
    objective = models.TextField()
    inputs = models.JSONField(default=list)
    constraints = models.JSONField(default=list)
    success_criteria = models.JSONField(default=list)
    risk = models.CharField(max_length=6, choices=RISK_CHOICES)
    depends_on = models.JSONField(default=list)
    state = models.CharField(max_length=9, choices=STATE_CHOICES)
    attempt = models.PositiveIntegerField(default=0)
    version = models.PositiveIntegerField()
    progress = models.JSONField(default=dict, help_text="a goal's tasks counted by state; empty for a task")
    forked_from = models.UUIDField(
        null=True, blank=True, help_text="the goal or task this one was forked from (GoalForked); empty: none"
    )
    forked_at_position = models.BigIntegerField(
        null=True, blank=True, help_text="the log position of the source's state the fork started from"
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["goal_id", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["goal", "key"], name="task_key_per_goal")]
        indexes = [
            models.Index(fields=["project", "is_goal", "-created_at"], name="task_project_goals"),
            models.Index(fields=["project", "state"], name="task_project_state"),
            models.Index(fields=["forked_from"], name="task_forked_from"),
        ]

    def __str__(self) -> str:
        return f"goal: {self.objective[:60]}" if self.is_goal else f"{self.key}: {self.objective[:60]}"


class Goal(Task):
    """Goals only, for the admin: the same rows as ``Task``."""

    class Meta:
        proxy = True


class TaskTransition(models.Model):
    """One entry of a task's timeline: who moved it, when, from which state to which, and why.

    The primary key is the event's position in the log, so a rebuild reproduces the same rows.
    """

    position = models.BigIntegerField(primary_key=True)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="transitions", db_constraint=False)
    goal = models.ForeignKey(
        Task, on_delete=models.CASCADE, related_name="goal_transitions", db_constraint=False
    )
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="task_transitions", db_constraint=False
    )
    event_type = models.CharField(max_length=100)
    from_state = models.CharField(max_length=9, blank=True, help_text="'' for the creation")
    to_state = models.CharField(max_length=9)
    attempt = models.PositiveIntegerField()
    version = models.PositiveIntegerField()
    actor = models.CharField(max_length=200)
    reason = models.TextField(blank=True)
    decision_id = models.CharField(max_length=200, blank=True)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["position"]
        indexes = [models.Index(fields=["task", "position"], name="transition_task_position")]

    def __str__(self) -> str:
        return f"{self.from_state or '·'} → {self.to_state}"
