from __future__ import annotations

import uuid

from nexum.core.compilation.retention import ProjectRetentionSet
from nexum.core.ids import as_uuid
from nexum.core.tasks.lifecycle import (
    PENDING,
    GoalCreated,
    GoalForked,
    TaskBlocked,
    TaskCancelled,
    TaskCompleted,
    TaskCreated,
    TaskFailed,
    TaskStarted,
    TaskUnblocked,
    count_states,
    derive_goal_state,
    evolve,
    task_state_from_row,
)
from nexum.core.tasks.projects import (
    AgentTokenIssued,
    AgentTokenRevoked,
    ProjectCreated,
    ProjectHighRiskApprovalSet,
    ProjectRelevanceFloorSet,
)
from nexum.eventstore.projections import Projection, ReadModelRows, handles
from nexum.eventstore.reading import StoredEvent
from tasks_app.models import AgentToken, Project, Task, TaskTransition


class ProjectProjection(Projection):
    models = (Project, AgentToken)

    @handles(ProjectCreated)
    def project_created(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ProjectCreated = stored.event  # type: ignore[assignment]
        rows.insert(
            Project,
            id=as_uuid(event.project_id),
            slug=event.slug,
            name=event.name,
            description=event.description,
            created_at=stored.recorded_at,
            version=stored.version,
        )

    @handles(ProjectRelevanceFloorSet)
    def relevance_floor_set(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ProjectRelevanceFloorSet = stored.event  # type: ignore[assignment]
        rows.update(
            Project, as_uuid(stored.project_id), relevance_floor=event.relevance_floor, version=stored.version
        )

    @handles(ProjectHighRiskApprovalSet)
    def high_risk_approval_set(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ProjectHighRiskApprovalSet = stored.event  # type: ignore[assignment]
        rows.update(
            Project,
            as_uuid(stored.project_id),
            high_risk_approval=event.high_risk_approval,
            version=stored.version,
        )

    @handles(ProjectRetentionSet)
    def retention_set(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ProjectRetentionSet = stored.event  # type: ignore[assignment]
        rows.update(
            Project,
            as_uuid(stored.project_id),
            retention_context_days=event.context_days,
            retention_bundle_days=event.bundle_days,
            retention_check_output_days=event.check_output_days,
            version=stored.version,
        )

    @handles(AgentTokenIssued)
    def token_issued(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: AgentTokenIssued = stored.event  # type: ignore[assignment]
        rows.insert(
            AgentToken,
            id=as_uuid(event.token_id),
            project_id=as_uuid(stored.project_id),
            name=event.name,
            key_prefix=event.key_prefix,
            key_sha256=event.key_sha256,
            role=event.role,
            issued_at=stored.recorded_at,
            revoked_at=None,
        )
        rows.update(Project, as_uuid(stored.project_id), version=stored.version)

    @handles(AgentTokenRevoked)
    def token_revoked(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: AgentTokenRevoked = stored.event  # type: ignore[assignment]
        rows.update(AgentToken, as_uuid(event.token_id), revoked_at=stored.recorded_at)
        rows.update(Project, as_uuid(stored.project_id), version=stored.version)


class TaskProjection(Projection):
    """Goals and tasks with their states, and every task's transition timeline.

    A goal's ``progress`` counts its tasks by state and its ``state`` is derived from those counts: each
    task event carries ``goal_id``, so a handler finds the goal row by primary key.
    """

    models = (Task, TaskTransition)

    @handles(GoalCreated)
    def goal_created(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: GoalCreated = stored.event  # type: ignore[assignment]
        goal_id = as_uuid(event.goal_id)
        rows.insert(
            Task,
            id=goal_id,
            project_id=as_uuid(stored.project_id),
            goal_id=goal_id,
            parent_id=None,
            key="",
            ordinal=0,
            is_goal=True,
            objective=event.objective,
            inputs=list(event.inputs),
            constraints=list(event.constraints),
            success_criteria=list(event.success_criteria),
            risk=event.risk,
            depends_on=[],
            state=PENDING,
            attempt=0,
            version=stored.version,
            progress=count_states(()),
            created_at=stored.recorded_at,
            updated_at=stored.recorded_at,
        )

    @handles(GoalForked)
    def goal_forked(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        """The fork's goal names its source goal (a task's fork: the source task's goal), each of its tasks
        the task it was forked from."""
        event: GoalForked = stored.event  # type: ignore[assignment]
        goal_id = as_uuid(event.goal_id)
        rows.update(
            Task,
            goal_id,
            forked_from=as_uuid(event.source_goal_id),
            forked_at_position=event.at_position,
            version=stored.version,
            updated_at=stored.recorded_at,
        )
        for task_id, source_id in sorted(event.task_ids.items()):
            rows.update(
                Task, as_uuid(task_id), forked_from=as_uuid(source_id), forked_at_position=event.at_position
            )

    @handles(TaskCreated)
    def task_created(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: TaskCreated = stored.event  # type: ignore[assignment]
        task_id, goal_id = as_uuid(event.task_id), as_uuid(event.goal_id)
        rows.insert(
            Task,
            id=task_id,
            project_id=as_uuid(stored.project_id),
            goal_id=goal_id,
            parent_id=as_uuid(event.parent_id),
            key=event.key,
            ordinal=event.ordinal,
            is_goal=False,
            objective=event.objective,
            inputs=list(event.inputs),
            constraints=list(event.constraints),
            success_criteria=list(event.success_criteria),
            risk=event.risk,
            depends_on=list(event.depends_on),
            state=PENDING,
            attempt=0,
            version=stored.version,
            progress={},
            created_at=stored.recorded_at,
            updated_at=stored.recorded_at,
        )
        self._timeline(stored, rows, task_id, goal_id, "", PENDING, attempt=0)
        self._count(stored, rows, goal_id, None, PENDING)

    @handles(TaskStarted)
    def task_started(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        self._transition(stored, rows)

    @handles(TaskFailed)
    def task_failed(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        self._transition(stored, rows)

    @handles(TaskBlocked)
    def task_blocked(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        self._transition(stored, rows)

    @handles(TaskUnblocked)
    def task_unblocked(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        self._transition(stored, rows)

    @handles(TaskCancelled)
    def task_cancelled(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        self._transition(stored, rows)

    @handles(TaskCompleted)
    def task_completed(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        self._transition(stored, rows)

    def _transition(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event = stored.event
        task_id, goal_id = as_uuid(event.task_id), as_uuid(event.goal_id)  # type: ignore[attr-defined]
        task = rows.get(Task, task_id)
        if task is None:
            return
        after = evolve(
            task_state_from_row(task), event
        )  # the lifecycle's own fold (nexum.core.tasks.lifecycle)
        rows.update(
            Task,
            task_id,
            state=after.state,
            attempt=after.attempt,
            version=stored.version,
            updated_at=stored.recorded_at,
        )
        self._timeline(stored, rows, task_id, goal_id, task["state"], after.state, attempt=after.attempt)
        self._count(stored, rows, goal_id, task["state"], after.state)

    def _timeline(
        self,
        stored: StoredEvent,
        rows: ReadModelRows,
        task_id: uuid.UUID,
        goal_id: uuid.UUID,
        from_state: str,
        to_state: str,
        *,
        attempt: int,
    ) -> None:
        data = stored.data
        rows.insert(
            TaskTransition,
            position=stored.position,
            task_id=task_id,
            goal_id=goal_id,
            project_id=as_uuid(stored.project_id),
            event_type=stored.event_type,
            from_state=from_state,
            to_state=to_state,
            attempt=attempt,
            version=stored.version,
            actor=str(stored.metadata.get("actor", "")),
            reason=data.get("reason") or "",
            decision_id=data.get("decision_id") or "",
            recorded_at=stored.recorded_at,
        )

    def _count(
        self,
        stored: StoredEvent,
        rows: ReadModelRows,
        goal_id: uuid.UUID,
        from_state: str | None,
        to_state: str,
    ) -> None:
        goal = rows.get(Task, goal_id)
        if goal is None:
            return
        progress = dict(goal["progress"])
        if from_state is not None:
            progress[from_state] -= 1
        progress[to_state] += 1
        rows.update(
            Task, goal_id, progress=progress, state=derive_goal_state(progress), updated_at=stored.recorded_at
        )
