"""Forks (issue 27): a new goal whose world is a goal's, or one task's, as it stood at a past log position.

The source's state at the position is the one a replay compiles against (``projections.state_as_of``): the
rows a fork takes are read as they are now and, where an event after the position changed one, folded
again from that row's own streams up to the position (in memory, as a rebuild would); the fork is then
written as events of its own, in one transaction:
``GoalCreated``/``TaskCreated`` and ``GoalForked`` (the plan as it stood, every task pending),
``ItemsCarried`` (each world item of the scope under a new id with ``forked_from``), the tool narrowing,
the verification contracts and the grants in force then. The source's streams get no event.

A task's fork is a goal of its own, with the task and the steps it refines (their objectives are the
compiler's "parent step"); its goal's shared items come along, the other tasks and their items do not. The
fork's first compile then sees what a replay of the source at the position sees, so its prompt block is the
same, except for what a fork does not carry: check runs and resolver bundles belong to the source's
attempts (a fork resolves anew), compaction folds are not carried (the folded notes show instead), and the
project's tool registry is the project's, as it is now.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from context_app.resolution.models import Grant, Source
from context_app.resolution.services.grants import grant_issue
from context_app.world.models import Tool, ToolScope, WorldItem
from context_app.world.services.scopes import Scope
from context_app.world.services.tools import tool_scope_set
from nexum.adapters.gc_pause import collection_paused
from nexum.core.errors import PolicyRefused, ValidationFailed
from nexum.core.ids import FORK_IDS
from nexum.core.resolution.events import grant_stream
from nexum.core.tasks.lifecycle import GoalForked, goal_stream, plan_goal, task_stream, validate_fork_position
from nexum.core.text import validate_reason
from nexum.core.verification.contracts import contract_stream
from nexum.core.world.items import (
    CARRIED_FIELDS,
    CARRY_BATCH,
    ItemsCarried,
    carried_item_id,
    fork_stream,
    item_stream,
    tool_scope_stream,
)
from nexum.eventstore import projections, reading, store
from nexum.eventstore.models import Event
from nexum.eventstore.projections import Row
from tasks_app import selectors as task_selectors
from tasks_app.models import Task
from tasks_app.services.goals import goal_fork_create
from verification_app.models import Contract
from verification_app.services.contracts import contract_register

_ITEM_COLUMNS = (
    *(name for name in CARRIED_FIELDS if name not in {"item_id", "forked_from", "position"}),
    "id",
    "position",
)


@dataclass(frozen=True)
class ForkOutcome:
    """The fork's goal, its tasks by the ids of the tasks they were forked from, and how much it carried."""

    goal: Task
    source_goal_id: str
    source_task_id: str | None
    """A task's fork: the task forked (``task_ids`` has its copy); a goal's: ``None``."""
    task_ids: dict[str, str]
    """source task id → the fork's task id."""
    carried_items: int
    replayed: bool
    """True when the idempotency key had been used for this fork: nothing was written."""


@dataclass(frozen=True)
class _SourceState:
    """What a fork takes from the source as it stood at the position (plain values: read inside a rolled-back
    rebuild, written after it)."""

    goal: dict[str, Any]
    tasks: list[dict[str, Any]]
    items: list[dict[str, Any]]
    tool_scopes: list[dict[str, Any]]
    contracts: list[dict[str, Any]]
    grants: list[dict[str, Any]]


def goal_fork(
    *,
    project_id: str,
    goal_id: str,
    at_position: object,
    reason: object,
    actor: str,
    idempotency_key: str | None = None,
) -> ForkOutcome:
    """Fork a goal with its whole plan and world as of ``at_position`` (operators only, at the API)."""
    goal = task_selectors.goal_get(project_id=project_id, goal_id=goal_id)
    return _fork(project_id, goal, None, at_position, reason, actor, idempotency_key)


def task_fork(
    *,
    project_id: str,
    task_id: str,
    at_position: object,
    reason: object,
    actor: str,
    idempotency_key: str | None = None,
) -> ForkOutcome:
    """Fork one task, with the steps it refines and its goal's shared items, as of ``at_position``."""
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    if task.is_goal:
        raise ValidationFailed(
            "this is a goal: fork it with POST /api/v1/goals/{id}/fork", field="task_id", code="is_a_goal"
        )
    goal = task_selectors.goal_get(project_id=project_id, goal_id=task.goal_id)
    return _fork(project_id, goal, task, at_position, reason, actor, idempotency_key)


def _fork(
    project_id: str,
    goal: Task,
    task: Task | None,
    at_position: object,
    reason: object,
    actor: str,
    idempotency_key: str | None,
) -> ForkOutcome:
    reason = validate_reason(reason)
    fork_id = _fork_goal_id(project_id, idempotency_key)
    previous = _previous_fork(fork_id, goal, task, at_position, reason, idempotency_key)
    if previous is not None:
        return previous
    first = (
        Event.objects.filter(project_id=project_id)
        .order_by("project_position")
        .values_list("position", flat=True)
        .first()
    )
    position = validate_fork_position(at_position, first=first or 0, head=reading.project_head(project_id)[0])
    source = task or goal
    created_at = reading.read_stream(task_stream(str(source.id)) if task else goal_stream(str(goal.id)))[0]
    if created_at.position > position:
        raise PolicyRefused(
            f"the {'task' if task else 'goal'} was created at position {created_at.position}, after "
            f"at_position {position}: there is nothing to fork there",
            field="at_position",
            code="not_yet_created",
            details={"created_at_position": created_at.position},
        )
    with collection_paused():
        state = _read_source(goal, task, position)
        return _write_fork(project_id, fork_id, goal, task, position, reason, state, actor, idempotency_key)


def _fork_goal_id(project_id: str, idempotency_key: str | None) -> str:
    if idempotency_key is None:
        return str(uuid.uuid4())
    if not isinstance(idempotency_key, str) or not 0 < len(idempotency_key) <= store.IDEMPOTENCY_KEY_MAX:
        raise ValidationFailed(
            f"key must be 1–{store.IDEMPOTENCY_KEY_MAX} characters", field="key", code="invalid"
        )
    return str(uuid.uuid5(FORK_IDS, f"{project_id}:{idempotency_key}"))


def _previous_fork(
    fork_id: str,
    goal: Task,
    task: Task | None,
    at_position: object,
    reason: str,
    idempotency_key: str | None,
) -> ForkOutcome | None:
    """The fork made earlier with this key, when the request is the same; a different one is a conflict."""
    forked = next(
        (
            stored.event
            for stored in reading.read_stream(goal_stream(fork_id))
            if isinstance(stored.event, GoalForked)
        ),
        None,
    )
    asked = (str(goal.id), str(task.id) if task else None, at_position, reason)
    if forked is None or not store.replayed(
        goal_stream(fork_id),
        idempotency_key,
        same_request=lambda _: (
            (forked.source_goal_id, forked.source_task_id, forked.at_position, forked.reason) == asked
        ),
        different=f"key {idempotency_key!r} was used for a different fork",
        field="key",
    ):
        return None
    return ForkOutcome(
        goal=Task.objects.get(id=fork_id),
        source_goal_id=forked.source_goal_id,
        source_task_id=forked.source_task_id,
        task_ids={source: fork for fork, source in forked.task_ids.items()},
        carried_items=WorldItem.objects.filter(goal_id=fork_id, forked_from__isnull=False).count(),
        replayed=True,
    )


def _read_source(goal: Task, task: Task | None, position: int) -> _SourceState:
    """The goal, the tasks the fork takes (all, or the task and the steps it refines, in plan order), their
    items and the goal's shared ones, tool narrowing, contracts and grants, as they stood at ``position``.

    A plan does not change once created. Every other row is read as it is now and, when an event after the
    position changed it, folded again from its own streams' events up to the position (``_as_of``): the
    rows a replay's rebuild would hold, without rebuilding the project."""
    tasks = list(Task.objects.filter(goal_id=goal.id, is_goal=False).order_by("ordinal").values())
    if task is not None:
        by_id = {row["id"]: row for row in tasks}
        kept, current = set(), by_id.get(task.id)
        while current is not None:
            kept.add(current["id"])
            current = by_id.get(current["parent_id"])
        tasks = [row for row in tasks if row["id"] in kept]
    task_ids = [row["id"] for row in tasks]
    items = list(
        WorldItem.objects.filter(project_id=goal.project_id, goal_id=goal.id, position__lte=position)
        .filter(_shared_or(task_ids))
        .order_by("position")
        .values(*_ITEM_COLUMNS, "changed_position", "forked_from")
    )
    changed = {row["id"]: row for row in items if row["changed_position"] > position}
    if changed:
        streams = [item_stream(row["kind"], str(row["id"])) for row in changed.values()]
        if any(row["forked_from"] for row in changed.values()):
            streams.append(fork_stream(str(goal.id)))
        then = _as_of(WorldItem, streams, list(changed), position)
        items = [
            then[row["id"]] if row["id"] in changed else row
            for row in items
            if row["id"] in then or row["id"] not in changed
        ]
    scopes = list(ToolScope.objects.filter(id__in=[goal.id, *task_ids]).values_list("id", flat=True))
    grants = [
        grant_id
        for grant_id, task_id in Grant.objects.filter(
            project_id=goal.project_id, goal_id=goal.id
        ).values_list("id", "task_id")
        if task_id is None or task_id in task_ids
    ]
    contracts = list(Contract.objects.filter(task_id__in=task_ids).values_list("task_id", flat=True))
    now = timezone.now()
    return _SourceState(
        goal=Task.objects.filter(id=goal.id).values().get(),
        tasks=tasks,
        items=items,
        tool_scopes=_rows_then(ToolScope, tool_scope_stream, scopes, position),
        contracts=_rows_then(Contract, contract_stream, contracts, position),
        grants=[
            row
            for row in _rows_then(Grant, grant_stream, grants, position)
            if row["revoked_at"] is None and (row["expires_at"] is None or row["expires_at"] > now)
        ],
    )


def _rows_then(
    model: type[Any], stream_of: Callable[[str], str], pks: Sequence[Any], position: int
) -> list[Row]:
    """The rows ``pks`` of ``model`` (one stream each, ``stream_of(pk)``) as they stood at ``position``."""
    return list(_as_of(model, [stream_of(str(pk)) for pk in pks], pks, position).values())


def _as_of(model: type[Any], streams: Sequence[str], pks: Sequence[Any], position: int) -> dict[Any, Row]:
    """The rows ``pks`` of ``model`` as they stood at ``position``: their streams' events up to it, applied
    through the projections into memory (nothing is written). A row not yet recorded then is absent."""
    if not pks:
        return {}
    rows = projections.BufferedRows(transient=True)
    projections.apply(reading.read_streams(streams, until_position=position), rows)
    return rows.get_many(model, pks)


def _shared_or(task_ids: Sequence[uuid.UUID]) -> Q:
    return Q(task_id__isnull=True) | Q(task_id__in=list(task_ids))


def _write_fork(
    project_id: str,
    fork_id: str,
    goal: Task,
    task: Task | None,
    position: int,
    reason: str,
    state: _SourceState,
    actor: str,
    idempotency_key: str | None,
) -> ForkOutcome:
    keys = {row["id"]: row["key"] for row in state.tasks}
    plan = plan_goal(
        objective=state.goal["objective"],
        inputs=state.goal["inputs"],
        constraints=state.goal["constraints"],
        success_criteria=state.goal["success_criteria"],
        risk=state.goal["risk"],
        tasks=[
            {
                "key": row["key"],
                "objective": row["objective"],
                "inputs": row["inputs"],
                "constraints": row["constraints"],
                "success_criteria": row["success_criteria"],
                "risk": row["risk"],
                "depends_on": [key for key in row["depends_on"] if key in keys.values()],
                **({"parent": keys[row["parent_id"]]} if row["parent_id"] in keys else {}),
            }
            for row in state.tasks
        ],
    )
    new_task_ids = {str(source): str(uuid.uuid5(uuid.UUID(fork_id), key)) for source, key in keys.items()}
    new_scope = {str(goal.id): None, **new_task_ids}
    item_ids = {str(row["id"]): carried_item_id(fork_id, str(row["id"])) for row in state.items}
    carried = [_carried(row, item_ids, new_scope) for row in state.items]
    with transaction.atomic():
        forked = goal_fork_create(
            project_id=project_id,
            goal_id=fork_id,
            plan=plan,
            source_goal_id=str(goal.id),
            source_task_ids={key: str(source) for source, key in keys.items()},
            source_task_id=str(task.id) if task else None,
            at_position=position,
            reason=reason,
            actor=actor,
            idempotency_key=idempotency_key,
        )
        if carried:
            store.append(
                stream_id=fork_stream(fork_id),
                events=[
                    ItemsCarried(
                        goal_id=fork_id,
                        source_goal_id=str(goal.id),
                        items=tuple(carried[start : start + CARRY_BATCH]),
                    )
                    for start in range(0, len(carried), CARRY_BATCH)
                ],
                expected_version=0,
                idempotency_key=idempotency_key,
                actor=actor,
                project_id=project_id,
            )
        _carry_tool_scopes(project_id, fork_id, state.tool_scopes, new_scope, actor)
        _carry_contracts(project_id, state.contracts, new_task_ids, item_ids, actor)
        _carry_grants(project_id, fork_id, state.grants, new_task_ids, actor)
    return ForkOutcome(
        goal=forked,
        source_goal_id=str(goal.id),
        source_task_id=str(task.id) if task else None,
        task_ids=new_task_ids,
        carried_items=len(carried),
        replayed=False,
    )


def _carried(
    row: Mapping[str, Any], item_ids: Mapping[str, str], new_scope: Mapping[str, str | None]
) -> dict[str, Any]:
    """One item's ``ItemsCarried`` entry: its row as it stood, its links mapped to the fork's ids."""
    origin = str(row["id"])
    entry = {name: row[name] for name in _ITEM_COLUMNS if name != "id"}
    entry.update(
        item_id=item_ids[origin],
        forked_from=origin,
        task_id=new_scope[str(row["task_id"])] if row["task_id"] else None,
        observed_at=row["observed_at"].isoformat() if row["observed_at"] else None,
        supersedes=item_ids.get(str(row["supersedes"])) if row["supersedes"] else None,
        superseded_by=item_ids.get(str(row["superseded_by"])) if row["superseded_by"] else None,
    )
    return entry


def _carry_tool_scopes(
    project_id: str,
    fork_id: str,
    scopes: Sequence[Mapping[str, Any]],
    new_scope: Mapping[str, str | None],
    actor: str,
) -> None:
    """The goal's and tasks' tool narrowing, limited to tools still registered."""
    registered = set(Tool.objects.filter(project_id=project_id).values_list("name", flat=True))
    for row in scopes:
        task_id = new_scope[str(row["id"])]
        allowed = None if row["allowed"] is None else [name for name in row["allowed"] if name in registered]
        tool_scope_set(
            scope=Scope(project_id, fork_id, task_id),
            allowed=allowed,
            pinned=[name for name in row["pinned"] if name in registered],
            expected_version=0,
            actor=actor,
        )


def _carry_contracts(
    project_id: str,
    contracts: Sequence[Mapping[str, Any]],
    new_task_ids: Mapping[str, str],
    item_ids: Mapping[str, str],
    actor: str,
) -> None:
    """Each task's contract as it stood, derived from the fork's copies of the items it was derived from."""
    for row in contracts:
        contract_register(
            project_id=project_id,
            task_id=new_task_ids[str(row["task_id"])],
            contract={
                "checks": row["checks"],
                "require_checks": row["require_checks"],
                "on_failure": row["on_failure"],
            },
            actor=actor,
            trust_class=row["trust_class"],
            derived_from=[item_ids.get(item_id, item_id) for item_id in row["derived_from"]],
            reason=row["reason"],
        )


def _carry_grants(
    project_id: str,
    fork_id: str,
    grants: Sequence[Mapping[str, Any]],
    new_task_ids: Mapping[str, str],
    actor: str,
) -> None:
    """The grants in force at the position and still now, on the sources the project still has."""
    sources = set(Source.objects.filter(project_id=project_id).values_list("name", flat=True))
    for row in grants:
        scopes = {name: granted for name, granted in row["scopes"].items() if name in sources}
        if not scopes:
            continue
        grant_issue(
            project_id=project_id,
            sources=scopes,
            actor=actor,
            goal_id=None if row["task_id"] else fork_id,
            task_id=new_task_ids[str(row["task_id"])] if row["task_id"] else None,
            expires_at=row["expires_at"],
            reason=row["reason"] or f"carried by a fork from grant {row['id']}",
        )
