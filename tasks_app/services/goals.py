"""Creating a goal with its tasks, all pending: from a plan checked by ``plan_goal`` (or a fork's), the goal
and each task in its own stream.

Ids derived from an idempotency key: a retried goal creation names the same streams, so the event store
recognises the key and writes nothing again.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from nexum.core.errors import ValidationFailed
from nexum.core.ids import GOAL_IDS
from nexum.core.tasks.lifecycle import (
    GoalCreated,
    GoalForked,
    GoalPlan,
    TaskCreated,
    TaskSpec,
    goal_stream,
    plan_goal,
    task_stream,
)
from nexum.eventstore import store
from tasks_app import hooks, selectors
from tasks_app.models import Task


def goal_create(
    *,
    project_id: str,
    objective: str,
    tasks: Sequence[Mapping[str, Any]],
    actor: str,
    inputs: Sequence[str] = (),
    constraints: Sequence[str] = (),
    success_criteria: Sequence[str] = (),
    risk: str | None = None,
    idempotency_key: str | None = None,
    contracts: Mapping[str, Any] | None = None,
    contract_origin: Mapping[str, Any] | None = None,
) -> Task:
    """Create a goal (the root task) with its tasks, all pending. Returns the goal.

    Each task is a mapping with ``key`` and ``objective`` and optionally ``inputs``, ``constraints``,
    ``success_criteria`` (lists of strings), ``risk`` (default ``medium``), ``depends_on`` (keys in this
    goal) and ``parent`` (a key in this goal; the goal when absent). Unknown members, unknown keys and
    cycles are refused. With ``idempotency_key``, a repeat of the same request returns the same goal and
    writes nothing; the same key with a different request is a conflict (``idempotency_key_reused``).
    ``contracts`` maps task keys to verification contracts, registered in the same transaction by the
    handler of ``hooks.GoalContractsGiven`` (the verification gate's; ``contract_origin``: the declared
    ``trust_class`` and ``derived_from`` item ids, SPEC V8).
    """
    plan = plan_goal(
        objective=objective,
        tasks=list(tasks) if isinstance(tasks, list | tuple) else tasks,
        inputs=inputs,
        constraints=constraints,
        success_criteria=success_criteria,
        risk=risk,
    )
    project = selectors.project_get(project_id=project_id)
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str) or not idempotency_key:
            raise ValidationFailed("an idempotency key is a non-empty string", field="idempotency_key")
        goal_id = str(uuid.uuid5(GOAL_IDS, f"{project.id}:{idempotency_key}"))
    else:
        goal_id = str(uuid.uuid4())
    task_ids = _task_ids(goal_id, plan)
    common = {"actor": actor, "project_id": str(project.id), "idempotency_key": idempotency_key}
    with transaction.atomic():
        created = store.append(
            stream_id=goal_stream(goal_id),
            events=[_goal_created(goal_id, plan)],
            expected_version=0,
            **common,
        )
        for ordinal, spec in enumerate(plan.tasks, start=1):
            task_id = task_ids[spec.key]
            appended = store.append(
                stream_id=task_stream(task_id),
                events=[_task_created(goal_id, task_ids, ordinal, spec)],
                expected_version=0,
                **common,
            )
            if appended.replayed != created.replayed:
                # A retry must repeat the original request exactly; raising undoes this transaction.
                raise store.IdempotencyKeyReused(
                    f"idempotency key {idempotency_key!r} was used for a different goal",
                    field="idempotency_key",
                )
        if contracts:
            hooks.handle(
                hooks.GoalContractsGiven(
                    project_id=str(project.id),
                    task_ids=task_ids,
                    contracts=contracts,
                    origin=contract_origin,
                    actor=actor,
                    idempotency_key=idempotency_key,
                )
            )
    return Task.objects.get(id=goal_id)


def goal_fork_create(
    *,
    project_id: str,
    goal_id: str,
    plan: GoalPlan,
    source_goal_id: str,
    source_task_ids: Mapping[str, str],
    source_task_id: str | None,
    at_position: int,
    reason: str,
    actor: str,
    idempotency_key: str | None,
) -> Task:
    """Create the goal of a fork with its tasks, all pending, and record what it was forked from
    (``GoalForked``: the source goal, or task, and the position). ``source_task_ids`` maps the plan's task
    keys to the tasks they were forked from. The caller (the fork service, which carries the world) holds
    the transaction."""
    task_ids = _task_ids(goal_id, plan)
    common = {"actor": actor, "project_id": project_id, "idempotency_key": idempotency_key}
    store.append(
        stream_id=goal_stream(goal_id),
        events=[_goal_created(goal_id, plan)],
        expected_version=0,
        **common,
    )
    for ordinal, spec in enumerate(plan.tasks, start=1):
        task_id = task_ids[spec.key]
        store.append(
            stream_id=task_stream(task_id),
            events=[_task_created(goal_id, task_ids, ordinal, spec)],
            expected_version=0,
            **common,
        )
    # Once its tasks exist, so that the projection marks each with the task it was forked from. Without the
    # key (it names the goal's creation in this stream): a concurrent repeat of the fork stops here, 409.
    store.append(
        stream_id=goal_stream(goal_id),
        events=[
            GoalForked(
                goal_id=goal_id,
                source_goal_id=source_goal_id,
                source_task_id=source_task_id,
                at_position=at_position,
                reason=reason,
                task_ids={task_ids[key]: source for key, source in source_task_ids.items()},
            )
        ],
        expected_version=1,
        actor=actor,
        project_id=project_id,
    )
    return Task.objects.get(id=goal_id)


def _task_ids(goal_id: str, plan: GoalPlan) -> dict[str, str]:
    """The plan's task ids by key, derived from the goal's: a retry of the same goal names the same tasks."""
    return {spec.key: str(uuid.uuid5(uuid.UUID(goal_id), spec.key)) for spec in plan.tasks}


def _goal_created(goal_id: str, plan: GoalPlan) -> GoalCreated:
    return GoalCreated(
        goal_id=goal_id,
        objective=plan.objective,
        inputs=plan.inputs,
        constraints=plan.constraints,
        success_criteria=plan.success_criteria,
        risk=plan.risk,
        task_keys=tuple(spec.key for spec in plan.tasks),
    )


def _task_created(goal_id: str, task_ids: Mapping[str, str], ordinal: int, spec: TaskSpec) -> TaskCreated:
    """The plan's task ``spec`` (the ``ordinal``-th) as created under its goal; ``task_ids`` by key."""
    return TaskCreated(
        task_id=task_ids[spec.key],
        goal_id=goal_id,
        parent_id=task_ids[spec.parent] if spec.parent else goal_id,
        parent_key=spec.parent,
        key=spec.key,
        ordinal=ordinal,
        objective=spec.objective,
        inputs=spec.inputs,
        constraints=spec.constraints,
        success_criteria=spec.success_criteria,
        risk=spec.risk,
        depends_on=spec.depends_on,
    )
