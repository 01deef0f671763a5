"""Reads for the escalation UI and the admin dashboard. Staff see every project; nothing here writes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from context_app.compilation.models import ContextCompilation, StoredContext
from context_app.compilation.selectors.usage import CardDrift, drift_per_card
from context_app.resolution import selectors as resolution_selectors
from context_app.resolution.models import Escalation, Source
from context_app.resolution.selectors import plan_gate_guard
from nexum.core.errors import DomainError
from nexum.eventstore.verification import latest_verification
from nexum.work.selectors import stuck_requests
from tasks_app.models import Project, Task
from verification_app.models import CompletionRequest

KIND_LABELS = {
    "conflict": "Conflicting claims",
    "stale_only": "Only stale answers",
    "denied": "Source denied",
    "unreachable": "Source unreachable",
    "unanswered": "Unanswered question",
}


@dataclass(frozen=True)
class Evidence:
    """One item on one side of a gap, with its text when the bundle still holds it."""

    digest: str
    source: str
    locator: str
    trust_class: str
    observed_at: str | None
    stale_reason: str | None
    text: str | None
    labels: tuple[str, ...]
    rejected: bool
    chosen: bool

    @property
    def origin(self) -> str:
        return f"{self.source}:{self.locator}"

    @property
    def suspected_instruction(self) -> bool:
        return "suspected_instruction" in self.labels


@dataclass(frozen=True)
class GateStatus:
    open: bool
    message: str


def escalations(*, state: str | None = "open") -> QuerySet[Escalation]:
    rows = Escalation.objects.all()
    if state in ("open", "resolved"):
        rows = rows.filter(state=state)
    return rows.order_by("-position")


def tasks_by_id(ids: Any) -> dict[str, Task]:
    return {str(task.id): task for task in Task.objects.filter(id__in=set(ids)).select_related("goal")}


def evidence_of(escalation: Escalation) -> list[Evidence]:
    """The evidence entries of an escalation joined with the item texts of its bundle."""
    try:
        bundle = resolution_selectors.bundle_content(digest=escalation.bundle_digest)
    except DomainError:
        bundle = {"items": []}
    texts = {item["digest"]: item for item in bundle.get("items", [])}
    detail = escalation.resolution_detail or {}
    rejected = set(detail.get("rejected", []))
    chosen = set(detail.get("chosen", []))
    entries = []
    for entry in escalation.evidence:
        item = texts.get(entry["digest"], {})
        entries.append(
            Evidence(
                digest=entry["digest"],
                source=entry.get("source", item.get("source", "")),
                locator=entry.get("locator", item.get("locator", "")),
                trust_class=entry.get("trust_class", item.get("trust_class", "")),
                observed_at=entry.get("observed_at") or item.get("observed_at"),
                stale_reason=entry.get("stale_reason") or item.get("stale_reason"),
                text=item.get("text"),
                labels=tuple(item.get("labels") or ()),
                rejected=entry["digest"] in rejected,
                chosen=entry["digest"] in chosen,
            )
        )
    return entries


@dataclass(frozen=True)
class Reach:
    """The tasks a settlement of a conflict applies to: every task of its goal that sees the subject."""

    goal: Task | None
    tasks: tuple[Task, ...]

    @property
    def message(self) -> str:
        count = len(self.tasks)
        goal = f"goal “{self.goal.objective}”" if self.goal is not None else "its goal"
        keys = ", ".join(task.key for task in self.tasks)
        if count == 1:
            return f"applies to the 1 task of {goal} that sees this subject ({keys})"
        return f"applies to all {count} tasks of {goal} that see this subject ({keys})"


def settlement_reach(escalation: Escalation) -> Reach | None:
    """For a conflict: the tasks a side picked or a fact supplied applies to (R5, goal-wide)."""
    if escalation.kind != "conflict" or not escalation.subjects:
        return None
    tasks = resolution_selectors.goal_tasks_seeing(goal_id=escalation.goal_id, subject=escalation.subjects[0])
    return Reach(goal=Task.objects.filter(id=escalation.goal_id).first(), tasks=tuple(tasks))


def gate_status(task: Task) -> GateStatus:
    """Whether the plan gate lets the task start now (R9), in words."""
    try:
        plan_gate_guard(project_id=str(task.project_id), task_id=str(task.id))
    except DomainError as closed:
        return GateStatus(open=False, message=closed.message)
    if task.state != "pending" and task.state != "failed":
        return GateStatus(open=True, message=f"the plan gate is open; the task is {task.state}")
    waiting = [key for key in task.depends_on if not _completed(task, key)]
    if waiting:
        return GateStatus(open=True, message="the plan gate is open; waiting for " + ", ".join(waiting))
    return GateStatus(open=True, message="the plan gate is open: the task can start")


def _completed(task: Task, dependency: str) -> bool:
    return Task.objects.filter(goal_id=task.goal_id, key=dependency, state="completed").exists()


def grantable_sources(escalation: Escalation) -> QuerySet[Source]:
    return Source.objects.filter(project_id=escalation.project_id).order_by("name")


# --- the admin dashboard ------------------------------------------------------------------------------------


def drifting_cards() -> list[tuple[CardDrift, Project | None]]:
    """Cards, in every project, whose provider counts more than Nexum past the drift threshold (issue 28),
    worst first, each with its project."""
    drifting = [drift for drift in drift_per_card() if drift.drifting]
    projects = Project.objects.in_bulk([drift.project_id for drift in drifting])
    drifting.sort(key=lambda drift: -drift.summary.p95)
    return [(drift, projects.get(uuid.UUID(drift.project_id))) for drift in drifting]


def dashboard(limit: int = 8) -> dict[str, Any]:
    open_escalations = list(escalations(state="open")[:limit])
    tasks = tasks_by_id([e.task_id for e in open_escalations])
    compiles = list(ContextCompilation.objects.filter(status="done").order_by("-compiled_position")[:limit])
    contexts = {
        (c.project_id, c.digest): c.pk
        for c in StoredContext.objects.filter(digest__in=[c.digest for c in compiles]).only(
            "id", "project_id", "digest"
        )
    }
    compile_tasks = tasks_by_id([c.task_id for c in compiles])
    stuck = stuck_requests(limit=limit)
    stuck_tasks = tasks_by_id([r.task_id for r in stuck])
    return {
        "drifting": drifting_cards(),
        "log_verification": latest_verification(),
        "stuck": [(r, stuck_tasks.get(str(r.task_id))) for r in stuck],
        "open_escalation_count": Escalation.objects.filter(state="open").count(),
        "open_escalations": [
            (e, tasks.get(str(e.task_id)), KIND_LABELS.get(e.kind, e.kind)) for e in open_escalations
        ],
        "running": list(Task.objects.filter(is_goal=False, state="running").select_related("goal")[:limit]),
        "blocked": list(Task.objects.filter(is_goal=False, state="blocked").select_related("goal")[:limit]),
        "failed": list(Task.objects.filter(is_goal=False, state="failed").select_related("goal")[:limit]),
        "state_counts": {
            state: Task.objects.filter(is_goal=False, state=state).count()
            for state in ("pending", "running", "blocked", "failed", "completed", "cancelled")
        },
        "compiles": [
            (c, compile_tasks.get(str(c.task_id)), contexts.get((c.project_id, c.digest))) for c in compiles
        ],
        "decisions": list(
            CompletionRequest.objects.filter(decided=True)
            .select_related("task")
            .order_by("-decided_at")[:limit]
        ),
    }
