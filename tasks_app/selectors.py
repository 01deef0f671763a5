"""Reads of the task graph, always within one project: another project's id is simply not found."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import Count, Q, QuerySet

from nexum.core.errors import NotFound
from nexum.core.ids import uuid_or_none
from tasks_app.models import AgentToken, Project, Task, TaskTransition


def project_get(*, project_id: str | uuid.UUID) -> Project:
    project = Project.objects.filter(id=project_id).first()
    if project is None:
        raise NotFound(f"no project {project_id}", field="project_id")
    return project


def project_by_slug(*, slug: str) -> Project:
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        raise NotFound(f"no project with slug {slug!r}", field="project")
    return project


def project_list() -> QuerySet[Project]:
    """Every project by slug, with ``active_tokens``: how many of its tokens are not revoked."""
    return Project.objects.annotate(
        active_tokens=Count("agent_tokens", filter=Q(agent_tokens__revoked_at__isnull=True))
    ).order_by("slug")


def token_by_name(*, project: Project, name: str) -> AgentToken:
    token = AgentToken.objects.filter(project=project, name=name).first()
    if token is None:
        raise NotFound(f"project {project.slug} has no token named {name!r}", field="name")
    return token


def token_in_force(*, token_id: str) -> bool:
    """Whether the token still authenticates (not revoked): read from the table each time, never cached, so a
    revocation takes effect at the next check."""
    return AgentToken.objects.filter(id=token_id, revoked_at__isnull=True).exists()


def token_list(*, project: Project) -> QuerySet[AgentToken]:
    """A project's tokens, oldest first (revoked ones included)."""
    return AgentToken.objects.filter(project=project).order_by("issued_at", "name")


def task_get(*, project_id: str | uuid.UUID, task_id: str | uuid.UUID) -> Task:
    """A task or goal of the project; a missing, malformed or other project's id raises ``NotFound``."""
    pk = uuid_or_none(task_id)
    task = None if pk is None else Task.objects.filter(project_id=project_id, id=pk).first()
    if task is None:
        raise NotFound(f"no task {task_id}", field="task_id")
    return task


def goal_get(*, project_id: str | uuid.UUID, goal_id: str | uuid.UUID) -> Task:
    """A goal (the root task) of the project; a task that is not a goal is not found either."""
    pk = uuid_or_none(goal_id)
    goal = None if pk is None else Task.objects.filter(project_id=project_id, id=pk, is_goal=True).first()
    if goal is None:
        raise NotFound(f"no goal {goal_id}", field="goal_id")
    return goal


def goal_list(*, project_id: str | uuid.UUID) -> QuerySet[Task]:
    """The project's goals, newest first."""
    return Task.objects.filter(project_id=project_id, is_goal=True).order_by("-created_at", "id")


def goal_tasks(*, goal: Task) -> QuerySet[Task]:
    """A goal's tasks (not the goal itself) in plan order."""
    return Task.objects.filter(goal_id=goal.id, is_goal=False).order_by("ordinal")


def goal_task_get(*, project_id: str | uuid.UUID, goal_id: str | uuid.UUID, key: str) -> Task:
    """The task with ``key`` in a goal of the project (a task is addressable by goal and key)."""
    goal = goal_get(project_id=project_id, goal_id=goal_id)
    task = Task.objects.filter(goal_id=goal.id, is_goal=False, key=key).first()
    if task is None:
        raise NotFound(f"goal {goal.id} has no task {key!r}", field="key")
    return task


def task_list(
    *,
    project_id: str | uuid.UUID,
    goal_id: str | uuid.UUID | None = None,
    state: str | None = None,
    key: str | None = None,
) -> QuerySet[Task]:
    """The project's tasks (goals excluded), optionally of one goal (``NotFound`` if not the project's), in
    one state, with one key; ordered by creation, then goal and plan order."""
    tasks = Task.objects.filter(project_id=project_id, is_goal=False)
    if goal_id is not None:
        tasks = tasks.filter(goal_id=goal_get(project_id=project_id, goal_id=goal_id).id)
    if state is not None:
        tasks = tasks.filter(state=state)
    if key is not None:
        tasks = tasks.filter(key=key)
    return tasks.order_by("created_at", "goal_id", "ordinal")


def task_transitions(*, task: Task) -> QuerySet[TaskTransition]:
    """A task's timeline, oldest first. For a goal: the timeline of all its tasks."""
    if task.is_goal:
        return TaskTransition.objects.filter(goal_id=task.id).order_by("position")
    return TaskTransition.objects.filter(task_id=task.id).order_by("position")


def task_dependency_states(*, task: Task) -> dict[str, str]:
    """The current state of each task ``task`` depends on, by key."""
    if not task.depends_on:
        return {}
    return dict(
        Task.objects.filter(goal_id=task.goal_id, is_goal=False, key__in=task.depends_on).values_list(
            "key", "state"
        )
    )


def task_get_unscoped(*, task_id: str | uuid.UUID) -> Task:
    """A task by id in any project. Only for internal callers that were handed the id by the system itself
    (the verification gate's worker); never for an agent's request, which must use ``task_get``."""
    pk = uuid_or_none(task_id)
    task = None if pk is None else Task.objects.filter(id=pk).first()
    if task is None:
        raise NotFound(f"no task {task_id}", field="task_id")
    return task


FORK_TREE_MAX_NODES = 1000


def fork_tree(*, task: Task) -> list[dict[str, Any]]:
    """The forks of a task or goal, each with its own forks (``{id, goal_id, at_position, created_at,
    forks}``), oldest first: the tree the timeline and the admin show. At most ``FORK_TREE_MAX_NODES``
    nodes are read, level by level."""
    nodes: dict[Any, dict[str, Any]] = {}
    roots: list[dict[str, Any]] = []
    level, parents = [task.id], {task.id: roots}
    while level and len(nodes) < FORK_TREE_MAX_NODES:
        rows = (
            Task.objects.filter(project_id=task.project_id, forked_from__in=level)
            .order_by("created_at", "id")
            .values("id", "goal_id", "forked_from", "forked_at_position", "created_at")
        )[: FORK_TREE_MAX_NODES - len(nodes)]
        level = []
        for row in rows:
            node = {
                "id": row["id"],
                "goal_id": row["goal_id"],
                "at_position": row["forked_at_position"],
                "created_at": row["created_at"],
                "forks": [],
            }
            parents[row["forked_from"]].append(node)
            nodes[row["id"]] = node
            parents[row["id"]] = node["forks"]
            level.append(row["id"])
    return roots
