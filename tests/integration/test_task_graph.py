"""The task graph through its services (SPEC T0–T5, E5, E6): lifecycle, idempotency, rebuild, gate port."""

from __future__ import annotations

import importlib
import inspect
import itertools
import pkgutil
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import pytest
from django.db import connections, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from nexum.core.errors import ConcurrencyError, DomainError, NotFound
from nexum.core.events import DomainEvent, event_from_data, upcast
from nexum.core.tasks.lifecycle import (
    ALLOWED_FROM,
    COMPLETED,
    TASK_STATES,
    TaskState,
    count_states,
    derive_goal_state,
    replay,
    task_stream,
)
from nexum.eventstore import projections, reading
from nexum.eventstore.models import Event
from tasks_app import selectors
from tasks_app.models import Task, TaskTransition
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import (
    task_block,
    task_cancel,
    task_fail,
    task_record_gate_decision,
    task_start,
    task_unblock,
)

PLAN = [
    {"key": "s1", "objective": "gather the requirements"},
    {"key": "s2", "objective": "write the code", "depends_on": ["s1"], "risk": "high"},
    {"key": "s3", "objective": "document it", "depends_on": ["s1", "s2"], "parent": "s2"},
]

TRANSITIONS = {
    "start": task_start,
    "fail": task_fail,
    "block": task_block,
    "unblock": task_unblock,
    "cancel": task_cancel,
}


def make_goal(project, **extra):
    return goal_create(project_id=str(project.id), objective="Ship it", tasks=PLAN, actor="t", **extra)


def tasks_of(goal) -> dict[str, Task]:
    return {task.key: task for task in selectors.goal_tasks(goal=goal)}


def gate(task: Task, outcome: str = COMPLETED, decision_id: str = "decision-1") -> Task:
    return task_record_gate_decision(
        task_id=str(task.id),
        outcome=outcome,
        decision_id=decision_id,
        expected_version=task.version,
        actor="gate",
    )


@pytest.mark.django_db
def test_a_goal_is_created_with_its_plan(project):
    goal = make_goal(project)
    assert (goal.is_goal, goal.goal_id, goal.parent_id, goal.key) == (True, goal.id, None, "")
    assert (goal.state, goal.risk, goal.version) == ("pending", "high", 1)
    assert goal.progress == count_states(["pending"] * 3)
    tasks = tasks_of(goal)
    assert list(tasks) == ["s1", "s2", "s3"]
    assert tasks["s3"].parent_id == tasks["s2"].id and tasks["s1"].parent_id == goal.id
    assert tasks["s3"].depends_on == ["s1", "s2"]
    assert {t.goal_id for t in tasks.values()} == {goal.id}
    assert all((t.state, t.attempt, t.version) == ("pending", 0, 1) for t in tasks.values())
    assert selectors.goal_get(project_id=project.id, goal_id=goal.id) == goal
    assert selectors.task_get(project_id=project.id, task_id=str(tasks["s1"].id)) == tasks["s1"]
    (created,) = selectors.task_transitions(task=tasks["s1"])
    assert (created.from_state, created.to_state, created.actor) == ("", "pending", "t")


@pytest.mark.django_db
def test_selectors_raise_not_found_for_missing_malformed_and_other_projects_ids(project, other_project):
    goal = make_goal(project)
    task = tasks_of(goal)["s1"]
    for selector, field, ids in [
        (selectors.goal_get, "goal_id", [goal.id, task.id]),
        (selectors.task_get, "task_id", [task.id]),
    ]:
        for bad in ["nope", "", None, "00000000-0000-0000-0000-000000000000"]:
            with pytest.raises(NotFound):
                selector(project_id=project.id, **{field: bad})
        for good in ids:
            with pytest.raises(NotFound):
                selector(project_id=other_project.id, **{field: good})
    with pytest.raises(NotFound):
        selectors.goal_get(project_id=project.id, goal_id=task.id)  # a task is not a goal


@pytest.mark.django_db
def test_the_lifecycle_with_retry_block_and_the_gate(project):
    goal = make_goal(project)
    s1 = tasks_of(goal)["s1"]
    pid = str(project.id)
    s1 = task_start(project_id=pid, task_id=str(s1.id), actor="agent:a", reason="go")
    s1 = task_fail(project_id=pid, task_id=str(s1.id), actor="agent:a", reason="tests red")
    s1 = task_start(project_id=pid, task_id=str(s1.id), actor="agent:a", reason="retry")
    assert (s1.state, s1.attempt, s1.version) == ("running", 2, 4)
    s1 = task_block(project_id=pid, task_id=str(s1.id), actor="agent:a", reason="need a key")
    goal.refresh_from_db()
    assert goal.state == "blocked"
    s1 = task_unblock(project_id=pid, task_id=str(s1.id), actor="operator", reason="key given")
    s1 = gate(s1)
    assert (s1.state, s1.attempt, s1.version) == ("completed", 2, 7)
    timeline = [(t.from_state, t.to_state, t.actor, t.reason) for t in selectors.task_transitions(task=s1)]
    assert timeline == [
        ("", "pending", "t", ""),
        ("pending", "running", "agent:a", "go"),
        ("running", "failed", "agent:a", "tests red"),
        ("failed", "running", "agent:a", "retry"),
        ("running", "blocked", "agent:a", "need a key"),
        ("blocked", "running", "operator", "key given"),
        ("running", "completed", "gate", ""),
    ]
    assert TaskTransition.objects.get(task=s1, to_state="completed").decision_id == "decision-1"
    goal.refresh_from_db()
    assert goal.state == "running"  # s1 done, the others pending
    assert goal.progress["completed"] == 1


@pytest.mark.django_db
def test_a_task_starts_only_when_its_dependencies_are_completed(project):
    goal = make_goal(project)
    tasks = tasks_of(goal)
    before = Event.objects.count()
    with pytest.raises(DomainError) as raised:
        task_start(project_id=str(project.id), task_id=str(tasks["s2"].id), actor="a")
    assert raised.value.code == "dependencies_not_completed"
    assert raised.value.details == {"waiting_for": {"s1": "pending"}}
    assert Event.objects.count() == before
    gate(task_start(project_id=str(project.id), task_id=str(tasks["s1"].id), actor="a"))
    s2 = task_start(project_id=str(project.id), task_id=str(tasks["s2"].id), actor="a")
    assert s2.state == "running"


@pytest.mark.django_db
def test_illegal_transitions_and_stale_versions_write_nothing(project):
    goal = make_goal(project)
    s1 = tasks_of(goal)["s1"]
    pid = str(project.id)
    before = Event.objects.count()
    for command in ("fail", "block", "unblock"):
        with pytest.raises(DomainError) as raised:
            TRANSITIONS[command](project_id=pid, task_id=str(s1.id), actor="a")
        assert raised.value.code == "illegal_transition"
    with pytest.raises(ConcurrencyError):
        task_start(project_id=pid, task_id=str(s1.id), actor="a", expected_version=5)
    with pytest.raises(DomainError) as raised:
        task_start(project_id=pid, task_id=str(goal.id), actor="a")
    assert raised.value.code == "illegal_transition"  # a goal's state is derived
    assert Event.objects.count() == before
    task_start(project_id=pid, task_id=str(s1.id), actor="a", expected_version=1)


@pytest.mark.django_db
def test_no_public_service_can_complete_a_task(project):
    """Completion comes only through ``task_record_gate_decision``, reserved for the verification gate."""
    # No other service (in any module of tasks_app.services) takes an outcome or produces TaskCompleted: the
    # gate port is the only one.
    package = importlib.import_module("tasks_app.services")
    modules = [
        importlib.import_module(f"{package.__name__}.{module.name}")
        for module in pkgutil.iter_modules(package.__path__)
    ]
    source = "".join(inspect.getsource(module) for module in modules)
    assert source.count("TaskCompleted(") == 0  # built only inside the core's decide_gate_decision
    takes_outcome = [
        name
        for module in modules
        for name, function in inspect.getmembers(module, inspect.isfunction)
        if function.__module__ == module.__name__ and "outcome" in inspect.signature(function).parameters
    ]
    assert takes_outcome == ["task_record_gate_decision"]
    assert "decide_gate_decision" in inspect.getsource(task_record_gate_decision)
    assert source.count("decide_gate_decision(") == 1
    # No endpoint or admin module refers to the gate port.
    import nexum_web.api.tasks
    import tasks_app.admin

    for module in (nexum_web.api.tasks, tasks_app.admin):
        assert "task_record_gate_decision" not in inspect.getsource(module)


@pytest.mark.django_db
def test_the_gate_port_records_failed_and_blocked_decisions_and_refuses_non_running_tasks(project):
    goal = make_goal(project)
    s1 = task_start(project_id=str(project.id), task_id=str(tasks_of(goal)["s1"].id), actor="a")
    s1 = gate(s1, outcome="failed", decision_id="d-1")
    assert s1.state == "failed"
    before = Event.objects.count()
    with pytest.raises(DomainError) as raised:
        gate(s1)
    assert raised.value.code == "illegal_transition"
    with pytest.raises(NotFound):
        task_record_gate_decision(
            task_id="nope", outcome="completed", decision_id="d", expected_version=None, actor="gate"
        )
    assert Event.objects.count() == before
    s1 = task_start(project_id=str(project.id), task_id=str(s1.id), actor="a")
    s1 = gate(s1, outcome="blocked", decision_id="d-2")
    assert (s1.state, s1.attempt) == ("blocked", 2)


@pytest.mark.django_db
def test_idempotency_keys_make_retries_write_nothing(project):
    goal = make_goal(project, idempotency_key="plan-1")
    count = Event.objects.count()
    assert make_goal(project, idempotency_key="plan-1").id == goal.id
    assert Event.objects.count() == count
    with pytest.raises(DomainError) as raised:
        goal_create(
            project_id=str(project.id), objective="Other", tasks=PLAN, actor="t", idempotency_key="plan-1"
        )
    assert raised.value.code == "idempotency_key_reused"
    longer = [*PLAN, {"key": "s4", "objective": "more"}]
    with pytest.raises(DomainError) as raised:
        goal_create(
            project_id=str(project.id), objective="Ship it", tasks=longer, actor="t", idempotency_key="plan-1"
        )
    assert raised.value.code == "idempotency_key_reused"
    assert Event.objects.count() == count

    s1 = tasks_of(goal)["s1"]
    args = {"project_id": str(project.id), "task_id": str(s1.id), "actor": "a", "reason": "go"}
    first = task_start(**args, idempotency_key="start-1")
    count = Event.objects.count()
    again = task_start(**args, idempotency_key="start-1", expected_version=1)
    assert (again.version, again.attempt) == (first.version, first.attempt) == (2, 1)
    assert Event.objects.count() == count
    with pytest.raises(DomainError) as raised:
        task_fail(**args, idempotency_key="start-1")
    assert raised.value.code == "idempotency_key_reused"
    assert Event.objects.count() == count


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_starts_exactly_one_wins(project):
    goal = make_goal(project)
    s1 = tasks_of(goal)["s1"]
    barrier = threading.Barrier(2)

    def attempt(n: int) -> str:
        try:
            barrier.wait()
            task_start(project_id=str(project.id), task_id=str(s1.id), actor=f"agent:{n}")
            return "started"
        except DomainError as error:
            return error.code
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = sorted(pool.map(attempt, range(2)))
    assert outcomes[1] == "started" and outcomes[0] in ("concurrency_conflict", "illegal_transition")
    assert [e.event_type for e in reading.read_stream(task_stream(str(s1.id)))] == [
        "TaskCreated",
        "TaskStarted",
    ]


# --- random sequences: the projection always equals a pure replay of the log -----------------------------


COMMANDS = [*TRANSITIONS, "gate:completed", "gate:failed", "gate:blocked"]
COMMAND_OF_EVENT = {
    "TaskStarted": "start",
    "TaskFailed": "fail",
    "TaskBlocked": "block",
    "TaskUnblocked": "unblock",
    "TaskCancelled": "cancel",
    "TaskCompleted": "gate",
}


def assert_projection_equals_replay(goal_id) -> dict[str, TaskState]:
    """Read models of one goal against a pure replay of its streams (three queries); returns the replay."""
    rows = {str(task.id): task for task in Task.objects.filter(goal_id=goal_id)}
    goal = rows.pop(str(goal_id))
    streams: dict[str, list[tuple[int, DomainEvent]]] = {task_stream(task_id): [] for task_id in rows}
    for stream_id, position, name, schema_version, data in (
        Event.objects.filter(stream_id__in=streams)
        .order_by("stream_id", "version")
        .values_list("stream_id", "position", "event_type", "schema_version", "data")
    ):
        streams[stream_id].append((position, event_from_data(name, upcast(name, schema_version, data))))
    timelines: dict[str, list[TaskTransition]] = {task_id: [] for task_id in rows}
    for transition in TaskTransition.objects.filter(goal_id=goal_id).order_by("position"):
        timelines[str(transition.task_id)].append(transition)
    replayed: dict[str, TaskState] = {}
    for task_id, task in rows.items():
        stream = streams[task_stream(task_id)]
        folded = replay(event for _, event in stream)
        assert folded is not None
        assert (task.state, task.attempt, task.version) == (folded.state, folded.attempt, folded.version)
        assert task.state in TASK_STATES
        replayed[task.key] = folded
        timeline = timelines[task_id]
        assert [t.position for t in timeline] == [position for position, _ in stream]
        for earlier, later in itertools.pairwise(timeline):
            assert later.from_state == earlier.to_state
            command = "gate" if later.decision_id else COMMAND_OF_EVENT[later.event_type]
            assert later.from_state in ALLOWED_FROM[command], (later.event_type, later.from_state)
            if later.to_state == COMPLETED:
                assert later.decision_id and later.actor == "gate"
    counts = count_states(task.state for task in replayed.values())
    assert goal.progress == counts
    assert goal.state == derive_goal_state(counts)
    return replayed


class TaskLifecycleMachine(RuleBasedStateMachine):
    """Random transition commands against the services, checked against a model of the lifecycle; after
    each step the read models equal a pure replay of the log (and the model).

    The goal is created once per test; each example runs in a savepoint that is rolled back.
    """

    project_id: str = ""
    goal_id: str = ""
    task_ids: ClassVar[dict[str, str]] = {}

    def __init__(self) -> None:
        super().__init__()
        self._atomic = transaction.atomic()
        self._atomic.__enter__()
        self.model = {key: ("pending", 0, 1) for key in self.task_ids}  # state, attempt, version
        self.depends_on = {spec["key"]: spec.get("depends_on", []) for spec in PLAN}
        self.verified_head: int | None = None

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self._atomic.__exit__(None, None, None)

    @rule(
        key=st.sampled_from([spec["key"] for spec in PLAN]),
        command=st.sampled_from(COMMANDS),
        stale=st.sampled_from([None, None, None, 0, 99]),
    )
    def transition(self, key: str, command: str, stale: int | None) -> None:
        state, attempt, version = self.model[key]
        expected = version if stale is None else stale
        task_id = self.task_ids[key]
        try:
            if command.startswith("gate:"):
                result = task_record_gate_decision(
                    task_id=task_id,
                    outcome=command.removeprefix("gate:"),
                    decision_id=f"d-{key}-{version}",
                    expected_version=expected,
                    actor="gate",
                )
            else:
                result = TRANSITIONS[command](
                    project_id=self.project_id, task_id=task_id, actor="a", expected_version=expected
                )
        except DomainError as error:
            # Refused: the model stays as it is, and the invariant checks that nothing was written.
            if error.code == "concurrency_conflict":
                assert expected != version
            elif error.code == "dependencies_not_completed":
                assert command == "start" and expected == version
                assert any(self.model[dep][0] != COMPLETED for dep in self.depends_on[key])
            else:
                assert error.code == "illegal_transition", error.code
                assert state not in ALLOWED_FROM["gate" if command.startswith("gate:") else command]
            return
        assert result is not None and expected == version
        self.model[key] = (result.state, result.attempt, version + 1)
        target = command.removeprefix("gate:") if command.startswith("gate:") else None
        expected_state = (
            target
            or {
                "start": "running",
                "fail": "failed",
                "block": "blocked",
                "unblock": "running",
                "cancel": "cancelled",
            }[command]
        )
        assert result.state == expected_state
        assert result.attempt == (attempt + 1 if command == "start" else attempt)

    @invariant()
    def projection_equals_replay_and_model(self) -> None:
        head = reading.head_position()
        if head == self.verified_head:
            # Nothing was appended since the last full check: the rows must still be exactly the model.
            rows = Task.objects.filter(goal_id=self.goal_id, is_goal=False).values_list(
                "key", "state", "attempt", "version"
            )
            assert {key: (state, attempt, version) for key, state, attempt, version in rows} == self.model
            return
        replayed = assert_projection_equals_replay(self.goal_id)
        assert {key: (t.state, t.attempt, t.version) for key, t in replayed.items()} == self.model
        self.verified_head = head


@pytest.mark.django_db
def test_random_transition_sequences_keep_the_projection_equal_to_a_replay(project):
    goal = make_goal(project)
    TaskLifecycleMachine.project_id = str(project.id)
    TaskLifecycleMachine.goal_id = str(goal.id)
    TaskLifecycleMachine.task_ids = {task.key: str(task.id) for task in selectors.goal_tasks(goal=goal)}
    run_state_machine_as_test(
        TaskLifecycleMachine,
        settings=settings(
            max_examples=500,
            stateful_step_count=6,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )


# --- rebuild equals live ------------------------------------------------------------------------------------


@pytest.mark.django_db
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(COMMANDS)), min_size=1, max_size=25))
def test_rebuilt_task_graph_equals_the_live_one(project, script):
    with transaction.atomic():
        goals = [make_goal(project), make_goal(project)]
        task_ids = [str(task.id) for goal in goals for task in selectors.goal_tasks(goal=goal)]
        for index, command in script:
            task_id = task_ids[index]
            try:
                if command.startswith("gate:"):
                    task_record_gate_decision(
                        task_id=task_id,
                        outcome=command.removeprefix("gate:"),
                        decision_id="d",
                        expected_version=None,
                        actor="gate",
                    )
                else:
                    TRANSITIONS[command](
                        project_id=str(project.id), task_id=task_id, actor="a", reason=command
                    )
            except DomainError:
                pass
        live = projections.snapshot()
        assert live["tasks_app_task"] and live["tasks_app_tasktransition"]
        projections.rebuild()
        assert projections.snapshot() == live
        for goal in goals:
            assert_projection_equals_replay(goal.id)
        transaction.set_rollback(True)
