"""The task graph's rules (SPEC T1–T5): goal plans, task events, the lifecycle as decide-then-evolve.

A goal is the root task of a plan. Its own state is not driven by commands: it is derived from its tasks'
states (``derive_goal_state``), so there is exactly one lifecycle to reason about — the task's::

    pending ──start──▶ running ──(gate: completed)──▶ completed
                        │  ▲  ▲
           fail / gate  │  │  └──unblock── blocked ◀──block / gate── running
                        ▼  │
                      failed ──start (retry, attempt + 1)──▶ running
    any non-final state ──cancel──▶ cancelled

``completed`` and ``cancelled`` are final. ``completed`` is reachable only through ``decide_gate_decision``,
which the verification gate calls after its deterministic checks; no other decide function produces
``TaskCompleted``.

Dependencies (``depends_on``) name other tasks of the same goal by key; ``parent`` names the task a step
refines (the goal when absent). Both graphs must be acyclic; a cycle is refused naming its path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from nexum.core.errors import Conflict, IllegalTransition, PolicyRefused, ValidationFailed
from nexum.core.events import DomainEvent, event_type
from nexum.core.text import is_storable, require_storable, validate_reason

# --- states and vocabulary ---

PENDING: Final = "pending"
RUNNING: Final = "running"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
BLOCKED: Final = "blocked"
CANCELLED: Final = "cancelled"

TASK_STATES: Final = (PENDING, RUNNING, COMPLETED, FAILED, BLOCKED, CANCELLED)
FINAL_STATES: Final = frozenset({COMPLETED, CANCELLED})
RISKS: Final = ("low", "medium", "high")
DEFAULT_RISK: Final = "medium"
GATE_OUTCOMES: Final = (COMPLETED, FAILED, BLOCKED)

# The only edges of the lifecycle, by command. ``complete`` belongs to the gate alone.
ALLOWED_FROM: Final[Mapping[str, frozenset[str]]] = {
    "start": frozenset({PENDING, FAILED}),
    "fail": frozenset({RUNNING}),
    "block": frozenset({RUNNING}),
    "unblock": frozenset({BLOCKED}),
    "cancel": frozenset({PENDING, RUNNING, FAILED, BLOCKED}),
    "gate": frozenset({RUNNING}),
}

# --- limits ---

KEY_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_TASKS: Final = 200
MAX_TEXT_CHARS: Final = 4000
MAX_LIST_ITEMS: Final = 100
MAX_ID_CHARS: Final = 200

GOAL_FIELDS: Final = frozenset({"objective", "inputs", "constraints", "success_criteria", "risk", "tasks"})
TASK_FIELDS: Final = frozenset(
    {"key", "objective", "inputs", "constraints", "success_criteria", "risk", "depends_on", "parent"}
)


def goal_stream(goal_id: str) -> str:
    return f"goal-{goal_id}"


def task_stream(task_id: str) -> str:
    return f"task-{task_id}"


# --- errors ---


class DependencyCycle(ValidationFailed):
    code = "dependency_cycle"


class ParentCycle(ValidationFailed):
    code = "parent_cycle"


class UnknownDependency(ValidationFailed):
    code = "unknown_dependency"


class DuplicateTaskKey(ValidationFailed):
    code = "duplicate_task_key"


class UnknownField(ValidationFailed):
    code = "unknown_field"


class DependenciesNotCompleted(Conflict):
    code = "dependencies_not_completed"


# --- events ---


@event_type("GoalCreated")
@dataclass(frozen=True)
class GoalCreated(DomainEvent):
    """A goal (the root task of a plan) and the keys of its tasks, in plan order."""

    goal_id: str
    objective: str
    inputs: tuple[str, ...]
    constraints: tuple[str, ...]
    success_criteria: tuple[str, ...]
    risk: str
    task_keys: tuple[str, ...]


@event_type("TaskCreated")
@dataclass(frozen=True)
class TaskCreated(DomainEvent):
    """One step of a goal's plan, pending. ``depends_on`` and ``parent_key`` are keys within the goal."""

    task_id: str
    goal_id: str
    parent_id: str
    parent_key: str | None
    key: str
    ordinal: int
    objective: str
    inputs: tuple[str, ...]
    constraints: tuple[str, ...]
    success_criteria: tuple[str, ...]
    risk: str
    depends_on: tuple[str, ...]


@event_type("TaskStarted")
@dataclass(frozen=True)
class TaskStarted(DomainEvent):
    """pending → running (first attempt) or failed → running (a retry); ``attempt`` is the new number."""

    task_id: str
    goal_id: str
    attempt: int
    reason: str


@event_type("TaskFailed")
@dataclass(frozen=True)
class TaskFailed(DomainEvent):
    """running → failed, by an agent or by a gate decision (``decision_id``)."""

    task_id: str
    goal_id: str
    reason: str
    decision_id: str | None = None


@event_type("TaskBlocked")
@dataclass(frozen=True)
class TaskBlocked(DomainEvent):
    """running → blocked: needs a human or an operator, by an agent or by a gate decision."""

    task_id: str
    goal_id: str
    reason: str
    decision_id: str | None = None


@event_type("TaskUnblocked")
@dataclass(frozen=True)
class TaskUnblocked(DomainEvent):
    task_id: str
    goal_id: str
    reason: str


@event_type("TaskCancelled")
@dataclass(frozen=True)
class TaskCancelled(DomainEvent):
    task_id: str
    goal_id: str
    reason: str


@event_type("TaskCompleted")
@dataclass(frozen=True)
class TaskCompleted(DomainEvent):
    """running → completed. Only the verification gate's decision produces this event."""

    task_id: str
    goal_id: str
    reason: str
    decision_id: str


@event_type("GoalForked")
@dataclass(frozen=True)
class GoalForked(DomainEvent):
    """A goal made as a fork of another goal (or of one of its tasks, ``source_task_id``) as it stood at
    log position ``at_position``; ``task_ids`` maps each of the fork's tasks to the task it was forked from.
    Recorded in the fork's goal stream right after its ``GoalCreated``."""

    goal_id: str
    source_goal_id: str
    source_task_id: str | None
    at_position: int
    reason: str
    task_ids: dict[str, str]


TRANSITION_EVENTS: Final[Mapping[str, str]] = {
    "TaskStarted": RUNNING,
    "TaskFailed": FAILED,
    "TaskBlocked": BLOCKED,
    "TaskUnblocked": RUNNING,
    "TaskCancelled": CANCELLED,
    "TaskCompleted": COMPLETED,
}
"""The state each transition event leads to."""


# --- the plan ---


@dataclass(frozen=True)
class TaskSpec:
    key: str
    objective: str
    inputs: tuple[str, ...]
    constraints: tuple[str, ...]
    success_criteria: tuple[str, ...]
    risk: str
    depends_on: tuple[str, ...]
    parent: str | None


@dataclass(frozen=True)
class GoalPlan:
    objective: str
    inputs: tuple[str, ...]
    constraints: tuple[str, ...]
    success_criteria: tuple[str, ...]
    risk: str
    tasks: tuple[TaskSpec, ...]


def plan_goal(
    *,
    objective: object,
    tasks: object,
    inputs: object = (),
    constraints: object = (),
    success_criteria: object = (),
    risk: object = None,
) -> GoalPlan:
    """Validate a goal and its tasks; raise a ``ValidationFailed`` naming the field at fault.

    A goal's risk defaults to the highest risk among its tasks. Unknown members of a task are refused
    (nothing is silently ignored). Dependencies and parents are keys of tasks in the same plan; either graph
    having a cycle is refused with the cycle's path in the message.
    """
    if not isinstance(tasks, list | tuple) or not tasks:
        raise ValidationFailed("a goal needs a non-empty list of tasks", field="tasks")
    if len(tasks) > MAX_TASKS:
        raise ValidationFailed(f"a goal has at most {MAX_TASKS} tasks", field="tasks")
    specs = tuple(_task_spec(item, f"tasks[{index}]") for index, item in enumerate(tasks))
    index_by_key: dict[str, int] = {}
    for index, spec in enumerate(specs):
        if spec.key in index_by_key:
            raise DuplicateTaskKey(
                f"task key {spec.key!r} is used by tasks[{index_by_key[spec.key]}] and tasks[{index}]",
                field=f"tasks[{index}].key",
            )
        index_by_key[spec.key] = index
    for index, spec in enumerate(specs):
        for position, dependency in enumerate(spec.depends_on):
            if dependency not in index_by_key:
                raise UnknownDependency(
                    f"task {spec.key!r} depends on {dependency!r}, which is not a task of this goal",
                    field=f"tasks[{index}].depends_on[{position}]",
                )
        if spec.parent is not None and spec.parent not in index_by_key:
            raise UnknownDependency(
                f"task {spec.key!r} has parent {spec.parent!r}, which is not a task of this goal",
                field=f"tasks[{index}].parent",
            )
    cycle = find_cycle({spec.key: spec.depends_on for spec in specs})
    if cycle is not None:
        raise DependencyCycle(
            f"depends_on forms a cycle: {' → '.join(cycle)}", field="tasks", details={"cycle": cycle}
        )
    parent_cycle = find_cycle({spec.key: (spec.parent,) if spec.parent else () for spec in specs})
    if parent_cycle is not None:
        raise ParentCycle(
            f"parent links form a cycle: {' → '.join(parent_cycle)}",
            field="tasks",
            details={"cycle": parent_cycle},
        )
    goal_risk = max((spec.risk for spec in specs), key=RISKS.index) if risk is None else _risk(risk, "risk")
    return GoalPlan(
        objective=_text(objective, "objective"),
        inputs=_strings(inputs, "inputs"),
        constraints=_strings(constraints, "constraints"),
        success_criteria=_strings(success_criteria, "success_criteria"),
        risk=goal_risk,
        tasks=specs,
    )


def find_cycle(graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """The first cycle found in ``graph`` (node → successors), as a closed path ``[a, b, a]``; else None.

    Deterministic: nodes and edges are visited in the mapping's and sequences' order. Iterative, so deep
    chains cannot exhaust the stack.
    """
    done: set[str] = set()
    for root in graph:
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        stack: list[Iterator[str]] = [iter(graph.get(root, ()))]
        while stack:
            successor = next(stack[-1], None)
            if successor is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if successor in on_path:
                return [*path[path.index(successor) :], successor]
            if successor in done:
                continue
            path.append(successor)
            on_path.add(successor)
            stack.append(iter(graph.get(successor, ())))
    return None


def _task_spec(item: object, where: str) -> TaskSpec:
    if not isinstance(item, Mapping):
        raise ValidationFailed(f"{where} must be an object", field=where)
    unknown = sorted(printable_name(name) for name in set(item) - TASK_FIELDS)
    if unknown:
        raise UnknownField(
            f"{where}: unknown field {unknown[0]!r} (a task takes {', '.join(sorted(TASK_FIELDS))})",
            field=f"{where}.{unknown[0]}",
        )
    for required in ("key", "objective"):
        if required not in item:
            raise ValidationFailed(f"{where}: {required} is required", field=f"{where}.{required}")
    key = _key(item["key"], f"{where}.key")
    depends_on = item.get("depends_on", ())
    if not isinstance(depends_on, list | tuple):
        raise ValidationFailed(f"{where}.depends_on must be a list of task keys", field=f"{where}.depends_on")
    if len(depends_on) > MAX_TASKS:
        raise ValidationFailed(f"{where}.depends_on is too long", field=f"{where}.depends_on")
    dependencies = tuple(
        dict.fromkeys(_key(value, f"{where}.depends_on[{n}]") for n, value in enumerate(depends_on))
    )
    parent = item.get("parent")
    return TaskSpec(
        key=key,
        objective=_text(item["objective"], f"{where}.objective"),
        inputs=_strings(item.get("inputs", ()), f"{where}.inputs"),
        constraints=_strings(item.get("constraints", ()), f"{where}.constraints"),
        success_criteria=_strings(item.get("success_criteria", ()), f"{where}.success_criteria"),
        risk=_risk(item.get("risk", DEFAULT_RISK), f"{where}.risk"),
        depends_on=dependencies,
        parent=None if parent is None else _key(parent, f"{where}.parent"),
    )


def _key(value: object, field: str) -> str:
    if not isinstance(value, str) or not KEY_PATTERN.fullmatch(value):
        raise ValidationFailed(
            "a task key is 1–64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            field=field,
        )
    return value


def _text(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationFailed(f"{field} must be a non-empty string", field=field)
    if len(value) > MAX_TEXT_CHARS:
        raise ValidationFailed(f"{field} has at most {MAX_TEXT_CHARS} characters", field=field)
    return require_storable(value, field).strip()


def printable_name(name: object) -> str:
    """A member name safe to echo in an error: itself, or its escaped form if it holds NUL or a surrogate."""
    text = str(name)
    return text if is_storable(text) else ascii(text)


def _strings(value: object, field: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise ValidationFailed(f"{field} must be a list of strings", field=field)
    if len(value) > MAX_LIST_ITEMS:
        raise ValidationFailed(f"{field} has at most {MAX_LIST_ITEMS} items", field=field)
    return tuple(_text(item, f"{field}[{n}]") for n, item in enumerate(value))


def _risk(value: object, field: str) -> str:
    if value not in RISKS:
        raise ValidationFailed(f"{field} must be one of {', '.join(RISKS)}", field=field)
    return str(value)


def validate_fork_position(value: object, *, first: int, head: int) -> int:
    """A fork's ``at_position``: a log position within the project's log, from its first event to its last
    (``first``/``head``, both 0 for a project with no events)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationFailed("at_position must be an integer log position", field="at_position")
    if head == 0 or not first <= value <= head:
        raise PolicyRefused(
            f"at_position {value} is outside this project's log (positions {first} to {head})"
            if head
            else f"at_position {value} is outside this project's log, which is empty",
            field="at_position",
            code="position_outside_log",
            details={"first_position": first, "head_position": head},
        )
    return value


# --- the lifecycle: state, evolve, decide ---


@dataclass(frozen=True)
class TaskState:
    """What the lifecycle needs to know about one task: a fold of its stream."""

    task_id: str
    goal_id: str
    key: str
    depends_on: tuple[str, ...] = ()
    state: str = PENDING
    attempt: int = 0
    version: int = 0


def evolve(task: TaskState | None, event: DomainEvent) -> TaskState:
    """Apply one event of a task's stream. The first event must be ``TaskCreated``."""
    if isinstance(event, TaskCreated):
        if task is not None:
            raise ValueError(f"task {event.task_id} created twice")
        return TaskState(event.task_id, event.goal_id, event.key, tuple(event.depends_on), PENDING, 0, 1)
    if task is None:
        raise ValueError(f"{event.event_type} before TaskCreated")
    target = TRANSITION_EVENTS.get(event.event_type)
    if target is None:
        return replace(task, version=task.version + 1)
    attempt = event.attempt if isinstance(event, TaskStarted) else task.attempt
    return replace(task, state=target, attempt=attempt, version=task.version + 1)


def replay(events: Iterable[DomainEvent]) -> TaskState | None:
    task: TaskState | None = None
    for event in events:
        task = evolve(task, event)
    return task


def _require(task: TaskState, command: str) -> None:
    allowed = ALLOWED_FROM[command]
    if task.state not in allowed:
        raise IllegalTransition(
            f"cannot {command} task {task.key!r}: it is {task.state}"
            f" ({command} applies to {', '.join(sorted(allowed))} tasks)",
            field="state",
            details={"state": task.state, "command": command, "allowed_from": sorted(allowed)},
        )


def decide_start(
    task: TaskState, *, dependency_states: Mapping[str, str], reason: str = ""
) -> list[DomainEvent]:
    """Start a pending task, or retry a failed one (attempt + 1). Every dependency must be completed.

    ``dependency_states`` maps each key in ``task.depends_on`` to that task's current state; a key missing
    from it counts as not completed.
    """
    _require(task, "start")
    waiting = {key: dependency_states.get(key, "missing") for key in task.depends_on}
    waiting = {key: state for key, state in waiting.items() if state != COMPLETED}
    if waiting:
        listed = ", ".join(f"{key} ({state})" for key, state in waiting.items())
        raise DependenciesNotCompleted(
            f"task {task.key!r} cannot start before its dependencies complete: {listed}",
            field="depends_on",
            details={"waiting_for": waiting},
        )
    return [TaskStarted(task.task_id, task.goal_id, attempt=task.attempt + 1, reason=validate_reason(reason))]


def decide_fail(task: TaskState, *, reason: str = "") -> list[DomainEvent]:
    _require(task, "fail")
    return [TaskFailed(task.task_id, task.goal_id, reason=validate_reason(reason))]


def decide_block(task: TaskState, *, reason: str = "") -> list[DomainEvent]:
    _require(task, "block")
    return [TaskBlocked(task.task_id, task.goal_id, reason=validate_reason(reason))]


def decide_unblock(task: TaskState, *, reason: str = "") -> list[DomainEvent]:
    _require(task, "unblock")
    return [TaskUnblocked(task.task_id, task.goal_id, reason=validate_reason(reason))]


def decide_cancel(task: TaskState, *, reason: str = "") -> list[DomainEvent]:
    _require(task, "cancel")
    return [TaskCancelled(task.task_id, task.goal_id, reason=validate_reason(reason))]


def decide_gate_decision(
    task: TaskState, *, outcome: str, decision_id: str, reason: str = ""
) -> list[DomainEvent]:
    """Record the verification gate's decision on a running task: the only way to ``completed``."""
    if outcome not in GATE_OUTCOMES:
        raise ValidationFailed(f"outcome must be one of {', '.join(GATE_OUTCOMES)}", field="outcome")
    if not isinstance(decision_id, str) or not decision_id or len(decision_id) > MAX_ID_CHARS:
        raise ValidationFailed("a gate decision needs its decision id", field="decision_id")
    _require(task, "gate")
    why = validate_reason(reason)
    if outcome == COMPLETED:
        return [TaskCompleted(task.task_id, task.goal_id, reason=why, decision_id=decision_id)]
    if outcome == FAILED:
        return [TaskFailed(task.task_id, task.goal_id, reason=why, decision_id=decision_id)]
    return [TaskBlocked(task.task_id, task.goal_id, reason=why, decision_id=decision_id)]


# --- the goal's derived state ---


def derive_goal_state(counts: Mapping[str, int]) -> str:
    """A goal's state from how many of its tasks are in each state.

    All tasks completed or cancelled: ``completed`` if at least one completed, else ``cancelled``. Otherwise
    the state that most needs attention: ``blocked``, then ``failed``, then ``running`` (also when some
    tasks are completed and others still pending), else ``pending``.
    """
    live = {state: n for state, n in counts.items() if n > 0}
    if not live:
        return PENDING
    if set(live) <= FINAL_STATES:
        return COMPLETED if live.get(COMPLETED) else CANCELLED
    for state in (BLOCKED, FAILED, RUNNING):
        if live.get(state):
            return state
    return RUNNING if live.get(COMPLETED) else PENDING


def count_states(states: Iterable[str]) -> dict[str, int]:
    counts = dict.fromkeys(TASK_STATES, 0)
    for state in states:
        counts[state] += 1
    return counts


def task_state_from_row(row: Mapping[str, Any]) -> TaskState:
    """A ``TaskState`` from a read-model row's values (``id``, ``goal_id``, ``key``, …)."""
    return TaskState(
        task_id=str(row["id"]),
        goal_id=str(row["goal_id"]),
        key=str(row["key"]),
        depends_on=tuple(row["depends_on"]),
        state=str(row["state"]),
        attempt=int(row["attempt"]),
        version=int(row["version"]),
    )
