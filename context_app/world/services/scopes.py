"""Where a world item belongs (``Scope``: a goal, or one task of it) and how a goal or task id of a project
names one."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from nexum.core.errors import NotFound, ValidationFailed
from tasks_app import selectors as task_selectors


@dataclass(frozen=True)
class Scope:
    """Where an item belongs: a goal (``task_id`` None, shared by its tasks) or one task of the goal."""

    project_id: str
    goal_id: str
    task_id: str | None
    attempt: int | None = None

    @property
    def scope_id(self) -> str:
        return self.task_id or self.goal_id


def scope_resolve(*, project_id: str, goal_id: str | None = None, task_id: str | None = None) -> Scope:
    """The scope of a goal or a task of ``project_id``; another project's goal or task is ``NotFound``.

    A goal addressed as a task is the goal's scope.
    """
    if (goal_id is None) == (task_id is None):
        raise ValidationFailed("an item belongs to exactly one goal or one task", field="scope")
    if goal_id is not None:
        goal = task_selectors.goal_get(project_id=project_id, goal_id=_uuid_text(goal_id, "goal_id"))
        return Scope(project_id, str(goal.id), None)
    task = task_selectors.task_get(project_id=project_id, task_id=_uuid_text(task_id, "task_id"))
    if getattr(task, "is_goal", False):
        return Scope(project_id, str(task.id), None)
    return Scope(project_id, str(task.goal_id), str(task.id), getattr(task, "attempt", None) or None)


def _uuid_text(value: Any, field: str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise NotFound(f"no {field.removesuffix('_id')} {value}", field=field) from None
