"""Writes to projects, agent tokens and the task graph. Every change is an event; read models follow by
projection.

The task graph's writes decide with the pure rules of ``nexum/core/tasks/lifecycle.py`` and append to the
task's own stream (``task-<id>``) at the version they decided on. No function here sets a task ``completed``
except ``task_record_gate_decision``, which is reserved for the verification gate (SPEC V): it is called by
the verification app after its deterministic checks, never by an endpoint or the admin.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from nexum.core.compilation.retention import ProjectRetentionSet, check_retention_policy
from nexum.core.errors import (
    Conflict,
    IllegalTransition,
    NotFound,
    ValidationFailed,
    check_expected,
)
from nexum.core.events import Event
from nexum.core.ids import GOAL_IDS
from nexum.core.roles import AGENT, check_role
from nexum.core.tasks.lifecycle import (
    GoalCreated,
    GoalForked,
    GoalPlan,
    TaskCreated,
    TaskSpec,
    TaskState,
    check_reason,
    decide_block,
    decide_cancel,
    decide_fail,
    decide_gate_decision,
    decide_start,
    decide_unblock,
    goal_stream,
    plan_goal,
    task_state_from_row,
    task_stream,
)
from nexum.core.tasks.projects import (
    AgentTokenIssued,
    AgentTokenRevoked,
    ProjectCreated,
    ProjectHighRiskApprovalSet,
    ProjectRelevanceFloorSet,
    check_project_name,
    check_relevance_floor,
    check_slug,
    check_token_name,
    project_stream,
)
from nexum.core.verification.approvals import check_stage_setting
from nexum.eventstore import store
from tasks_app import hooks, selectors
from tasks_app.models import AgentToken, Project, Task

TOKEN_PREFIX = "nx_"


@dataclass(frozen=True)
class IssuedToken:
    token: AgentToken
    key: str
    """The secret, shown once. Only its sha256 is stored."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def project_create(*, slug: str, name: str, description: str = "", actor: str) -> Project:
    check_slug(slug)
    name = check_project_name(name)
    if Project.objects.filter(slug=slug).exists():
        raise Conflict(f"a project with slug {slug!r} already exists", field="slug", code="project_exists")
    project_id = str(uuid.uuid4())
    store.append(
        stream_id=project_stream(project_id),
        events=[ProjectCreated(project_id=project_id, slug=slug, name=name, description=description)],
        expected_version=0,
        actor=actor,
        project_id=project_id,
    )
    return Project.objects.get(id=project_id)


def project_relevance_floor_set(*, project_id: str, relevance_floor: Any, actor: str) -> Project:
    """Set the project's relevance floor (a number from 0 to 1, or ``None`` for ``NEXUM_RELEVANCE_FLOOR``),
    as an event; the same value again writes nothing. Whether the caller may is the caller's check (an
    operator's: the API's and the admin's)."""
    project = selectors.project_get(project_id=project_id)
    floor = check_relevance_floor(relevance_floor)
    if floor == project.relevance_floor:
        return project
    store.append(
        stream_id=project_stream(str(project.id)),
        events=[ProjectRelevanceFloorSet(relevance_floor=floor, previous=project.relevance_floor)],
        expected_version=project.version,
        actor=actor,
        project_id=str(project.id),
    )
    project.refresh_from_db()
    return project


def project_high_risk_approval_set(*, project_id: str, high_risk_approval: Any, actor: str) -> Project:
    """Set the stage at which the project's high-risk tasks wait for an operator's approval when their
    contract says nothing (``before_start``, ``before_complete`` or ``None``), as an event; the same value
    again writes nothing. Whether the caller may is the caller's check (an operator's: the API's)."""
    project = selectors.project_get(project_id=project_id)
    stage = check_stage_setting(high_risk_approval)
    if stage == project.high_risk_approval:
        return project
    store.append(
        stream_id=project_stream(str(project.id)),
        events=[ProjectHighRiskApprovalSet(high_risk_approval=stage, previous=project.high_risk_approval)],
        expected_version=project.version,
        actor=actor,
        project_id=str(project.id),
    )
    project.refresh_from_db()
    return project


def project_retention(project: Project) -> dict[str, int | None]:
    """The project's own retention policy, by member (``None``: the service's default)."""
    return {
        "context_days": project.retention_context_days,
        "bundle_days": project.retention_bundle_days,
        "check_output_days": project.retention_check_output_days,
    }


def project_retention_set(*, project_id: str, policy: Mapping[str, Any], actor: str) -> Project:
    """Set the project's retention policy (each member a number of days, or ``None`` for the service's
    ``NEXUM_RETENTION_…_DAYS``), as an event; the same policy again writes nothing. Whether the caller may is
    the caller's check (an operator's)."""
    project = selectors.project_get(project_id=project_id)
    checked = check_retention_policy(policy)
    if checked == project_retention(project):
        return project
    store.append(
        stream_id=project_stream(str(project.id)),
        events=[ProjectRetentionSet(**checked)],
        expected_version=project.version,
        actor=actor,
        project_id=str(project.id),
    )
    project.refresh_from_db()
    return project


def agent_token_issue(
    *, project_id: str, name: str, actor: str, role: str = AGENT, key: str | None = None
) -> IssuedToken:
    """Issue a token for an agent or, with ``role="operator"``, for an operator (``nexum.core.roles``).
    ``key`` may be supplied (the development demo tokens); it is never stored."""
    project = selectors.project_get(project_id=project_id)
    check_role(role)
    check_token_name(name)
    if AgentToken.objects.filter(project=project, name=name).exists():
        raise Conflict(
            f"project {project.slug} already has a token named {name!r}", field="name", code="token_exists"
        )
    key = key or TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = str(uuid.uuid4())
    store.append(
        stream_id=project_stream(str(project.id)),
        events=[
            AgentTokenIssued(
                token_id=token_id, name=name, key_prefix=key[:8], key_sha256=hash_key(key), role=role
            )
        ],
        expected_version=project.version,
        actor=actor,
        project_id=str(project.id),
    )
    return IssuedToken(AgentToken.objects.get(id=token_id), key)


def agent_token_revoke(*, token_id: str, reason: str, actor: str) -> AgentToken:
    token = AgentToken.objects.select_related("project").filter(id=token_id).first()
    if token is None:
        raise NotFound(f"no agent token {token_id}", field="token_id")
    if token.revoked_at is None:
        store.append(
            stream_id=project_stream(str(token.project_id)),
            events=[AgentTokenRevoked(token_id=str(token.id), reason=reason)],
            expected_version=token.project.version,
            actor=actor,
            project_id=str(token.project_id),
        )
        token.refresh_from_db()
    return token


# --- the task graph ---------------------------------------------------------------------------------------

# Ids derived from an idempotency key: a retried goal creation names the same streams, so the event store
# recognises the key and writes nothing again.


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


def task_start(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> Task:
    """pending → running once every dependency is completed; failed → running is a retry (attempt + 1).

    Every start guard (``hooks.TaskStarting``) must pass. The plan gate's (SPEC R9) refuses with 422
    ``plan_gate_closed`` while the task's latest context bundle leaves an escalation open, unless an operator
    overrode it. Then the approval gate (``hooks.TaskStartDecided``) refuses with 409 ``approval_required``
    (or ``approval_denied``) until an operator grants the start of this attempt, when the task needs it."""

    def decide(task: Task, state: TaskState) -> list[Event]:
        hooks.handle(hooks.TaskStarting(project_id=str(task.project_id), task_id=str(task.id)))
        events = decide_start(
            state, dependency_states=selectors.task_dependency_states(task=task), reason=reason
        )
        hooks.handle(
            hooks.TaskStartDecided(
                project_id=str(task.project_id), task_id=str(task.id), attempt=task.attempt + 1, actor=actor
            )
        )
        return events

    return _transition(
        project_id, task_id, "TaskStarted", decide, actor, reason, expected_version, idempotency_key
    )


def task_fail(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> Task:
    """running → failed (retryable with ``task_start``)."""
    return _transition(
        project_id,
        task_id,
        "TaskFailed",
        lambda task, state: decide_fail(state, reason=reason),
        actor,
        reason,
        expected_version,
        idempotency_key,
    )


def task_block(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> Task:
    """running → blocked: the task needs a human or an operator."""
    return _transition(
        project_id,
        task_id,
        "TaskBlocked",
        lambda task, state: decide_block(state, reason=reason),
        actor,
        reason,
        expected_version,
        idempotency_key,
    )


def task_unblock(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> Task:
    """blocked → running."""
    return _transition(
        project_id,
        task_id,
        "TaskUnblocked",
        lambda task, state: decide_unblock(state, reason=reason),
        actor,
        reason,
        expected_version,
        idempotency_key,
    )


def task_cancel(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> Task:
    """Any non-final state → cancelled (final)."""
    return _transition(
        project_id,
        task_id,
        "TaskCancelled",
        lambda task, state: decide_cancel(state, reason=reason),
        actor,
        reason,
        expected_version,
        idempotency_key,
    )


def task_record_gate_decision(
    *,
    task_id: str,
    outcome: str,
    decision_id: str,
    expected_version: int | None,
    actor: str,
    reason: str = "",
    idempotency_key: str | None = None,
) -> Task:
    """RESERVED FOR THE VERIFICATION GATE: record its decision on a running task.

    ``outcome`` is ``completed``, ``failed`` or ``blocked``. This is the only code path that appends
    ``TaskCompleted``. It must never be called from an endpoint, an admin action or on an agent's claim —
    only by the verification app once its deterministic checks have decided. ``expected_version`` is the
    task version the gate ran against: of two concurrent decisions exactly one is recorded.
    """
    task = selectors.task_get_unscoped(task_id=task_id)
    return _transition(
        str(task.project_id),
        str(task.id),
        {"completed": "TaskCompleted", "failed": "TaskFailed", "blocked": "TaskBlocked"}.get(outcome, ""),
        lambda task, state: decide_gate_decision(
            state, outcome=outcome, decision_id=decision_id, reason=reason
        ),
        actor,
        reason,
        expected_version,
        idempotency_key,
    )


def _transition(
    project_id: str,
    task_id: str,
    event_type: str,
    decide: Callable[[Task, TaskState], list[Event]],
    actor: str,
    reason: str,
    expected_version: int | None,
    idempotency_key: str | None,
) -> Task:
    """Load the task within the project, decide on its current state, append at the version decided on."""
    reason = check_reason(reason)
    task = selectors.task_get(project_id=project_id, task_id=task_id)
    if task.is_goal:
        raise IllegalTransition(
            "a goal's state is derived from its tasks; start, fail, block, unblock or cancel its tasks",
            field="task_id",
            details={"state": task.state},
        )
    stream_id = task_stream(str(task.id))
    if idempotency_key is not None and _already_applied(stream_id, idempotency_key, event_type, reason):
        return task
    check_expected(task.version, expected_version, f"task {task.key}")
    events = decide(task, task_state_from_row(_row(task)))
    store.append(
        stream_id=stream_id,
        events=events,
        expected_version=task.version,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=str(task.project_id),
    )
    task.refresh_from_db()
    return task


def _already_applied(stream_id: str, idempotency_key: str, event_type: str, reason: str) -> bool:
    """Did a request with this idempotency key already change this task the same way?

    Checked before deciding, because a retried transition would otherwise be refused as illegal (the task
    has moved on). The same key used for a different change is a conflict, as in the event store.
    """
    recorded = store.appended_with_key(stream_id, idempotency_key)
    if not recorded:
        return False
    if [(name, data.get("reason")) for _, _, name, data in recorded] != [(event_type, reason)]:
        raise store.IdempotencyKeyReused(
            f"idempotency key {idempotency_key!r} was used on this task for a different change",
            field="idempotency_key",
        )
    return True


def _row(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "goal_id": task.goal_id,
        "key": task.key,
        "depends_on": task.depends_on,
        "state": task.state,
        "attempt": task.attempt,
        "version": task.version,
    }
