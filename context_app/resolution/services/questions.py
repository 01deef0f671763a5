"""A task's required questions (SPEC R7): what its step's bundle must answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_app.resolution.models import TaskQuestions
from nexum.core.errors import ConcurrencyError
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.validation import questions_to_data, validate_questions
from nexum.eventstore import store
from tasks_app import selectors as task_selectors


def questions_set(
    *,
    project_id: str,
    task_id: str,
    questions: Sequence[Mapping[str, Any]],
    actor: str,
    expected_version: int | None = None,
) -> TaskQuestions:
    """Replace the required questions of a task's step: ``[{question, subjects: [...]}, …]``."""
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    checked = validate_questions(questions)
    row = TaskQuestions.objects.filter(task_id=task.id).first()
    current = row.version if row is not None else 0
    if expected_version is not None and expected_version != current:
        raise ConcurrencyError(
            f"the questions are at version {current}, not {expected_version}", field="expected_version"
        )
    store.append(
        stream_id=resolution_events.questions_stream(str(task.id)),
        events=[
            resolution_events.RequiredQuestionsSet(
                task_id=str(task.id),
                goal_id=str(task.goal_id),
                questions=questions_to_data(checked),
            )
        ],
        expected_version=current,
        actor=actor,
        project_id=str(task.project_id),
    )
    return TaskQuestions.objects.get(task_id=task.id)
