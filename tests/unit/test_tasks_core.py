"""The task graph's pure rules (SPEC T1–T5): plans, cycles, the lifecycle, the goal's derived state."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexum.core.errors import IllegalTransition, ValidationFailed
from nexum.core.events import event_from_data, event_to_data
from nexum.core.tasks.lifecycle import (
    ALLOWED_FROM,
    BLOCKED,
    CANCELLED,
    COMPLETED,
    FAILED,
    FINAL_STATES,
    PENDING,
    RUNNING,
    TASK_STATES,
    DependenciesNotCompleted,
    TaskCompleted,
    TaskCreated,
    TaskState,
    count_states,
    decide_block,
    decide_cancel,
    decide_fail,
    decide_gate_decision,
    decide_start,
    decide_unblock,
    derive_goal_state,
    evolve,
    find_cycle,
    plan_goal,
    replay,
)


def step(key: str, **extra):
    return {"key": key, "objective": f"do {key}", **extra}


def task(state: str = PENDING, attempt: int = 0, depends_on: tuple[str, ...] = ()) -> TaskState:
    return TaskState("t-1", "g-1", "s1", depends_on, state, attempt, 3)


# --- plans and cycles ---


def test_find_cycle_names_the_path():
    assert find_cycle({"s1": ["s2"], "s2": ["s1"]}) == ["s1", "s2", "s1"]
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["b"]}) == ["b", "c", "b"]
    assert find_cycle({"s1": ["s1"]}) == ["s1", "s1"]
    assert find_cycle({"a": ["b", "c"], "b": ["c"], "c": []}) is None
    assert find_cycle({}) is None


def test_find_cycle_handles_a_long_chain_without_recursion():
    chain = {f"s{n}": [f"s{n + 1}"] for n in range(5000)}
    assert find_cycle(chain) is None
    chain["s5000"] = ["s0"]
    cycle = find_cycle(chain)
    assert cycle is not None and cycle[0] == cycle[-1] and len(cycle) == 5002


@given(st.dictionaries(st.sampled_from("abcdef"), st.lists(st.sampled_from("abcdef"), max_size=3)))
def test_find_cycle_agrees_with_a_topological_sort(graph):
    cycle = find_cycle(graph)
    remaining = {node: set(successors) for node, successors in graph.items()}
    for successors in graph.values():
        for node in successors:
            remaining.setdefault(node, set())
    while True:
        sinks = [node for node, successors in remaining.items() if not successors]
        if not sinks:
            break
        for node in sinks:
            del remaining[node]
        for successors in remaining.values():
            successors.difference_update(sinks)
    assert (cycle is None) == (not remaining)
    if cycle is not None:
        assert cycle[0] == cycle[-1]
        assert all(b in graph.get(a, ()) for a, b in itertools.pairwise(cycle))


def test_a_plan_is_validated_and_normalized():
    plan = plan_goal(
        objective="  Ship  ",
        tasks=[step("s1", risk="low"), step("s2", depends_on=["s1", "s1"], risk="high", parent="s1")],
    )
    assert plan.objective == "Ship"
    assert plan.risk == "high"  # the highest of its tasks by default
    assert plan.tasks[1].depends_on == ("s1",)
    assert plan.tasks[1].parent == "s1"
    assert plan.tasks[0].risk == "low"
    assert plan_goal(objective="x", tasks=[step("a")]).tasks[0].risk == "medium"
    assert plan_goal(objective="x", tasks=[step("a", risk="high")], risk="low").risk == "low"


@pytest.mark.parametrize(
    ("tasks", "code", "field"),
    [
        ([], "invalid", "tasks"),
        ("s1", "invalid", "tasks"),
        ([step("s1", contract={})], "unknown_field", "tasks[0].contract"),
        ([{"objective": "x"}], "invalid", "tasks[0].key"),
        ([step("s 1")], "invalid", "tasks[0].key"),
        ([step("s1"), step("s1")], "duplicate_task_key", "tasks[1].key"),
        ([step("s1", depends_on=["s9"])], "unknown_dependency", "tasks[0].depends_on[0]"),
        ([step("s1", parent="s9")], "unknown_dependency", "tasks[0].parent"),
        ([step("s1", depends_on="s2")], "invalid", "tasks[0].depends_on"),
        ([step("s1", risk="extreme")], "invalid", "tasks[0].risk"),
        ([step("s1", inputs=[1])], "invalid", "tasks[0].inputs[0]"),
        ([step("s1", objective="  ")], "invalid", "tasks[0].objective"),
        ([step("s1", depends_on=["s2"]), step("s2", depends_on=["s1"])], "dependency_cycle", "tasks"),
        ([step("s1", parent="s2"), step("s2", parent="s1")], "parent_cycle", "tasks"),
    ],
)
def test_bad_plans_are_refused_with_the_field_at_fault(tasks, code, field):
    with pytest.raises(ValidationFailed) as raised:
        plan_goal(objective="Ship", tasks=tasks)
    assert (raised.value.code, raised.value.field) == (code, field)


def test_a_cycle_is_named_in_the_message():
    with pytest.raises(ValidationFailed) as raised:
        plan_goal(
            objective="Ship",
            tasks=[step("s1", depends_on=["s2"]), step("s2", depends_on=["s1"]), step("s3")],
        )
    assert "s1 → s2 → s1" in raised.value.message
    assert raised.value.details == {"cycle": ["s1", "s2", "s1"]}


# --- the lifecycle ---


def test_start_needs_completed_dependencies():
    pending = task(depends_on=("a", "b"))
    with pytest.raises(DependenciesNotCompleted) as raised:
        decide_start(pending, dependency_states={"a": COMPLETED, "b": RUNNING})
    assert raised.value.details == {"waiting_for": {"b": RUNNING}}
    with pytest.raises(DependenciesNotCompleted):
        decide_start(pending, dependency_states={"a": COMPLETED})
    (started,) = decide_start(pending, dependency_states={"a": COMPLETED, "b": COMPLETED}, reason=" go ")
    assert (started.attempt, started.reason) == (1, "go")


def test_a_retry_raises_the_attempt():
    (started,) = decide_start(task(FAILED, attempt=2), dependency_states={})
    assert started.attempt == 3
    assert evolve(task(FAILED, attempt=2), started).attempt == 3


DECIDERS = {
    "start": lambda t: decide_start(t, dependency_states={}),
    "fail": decide_fail,
    "block": decide_block,
    "unblock": decide_unblock,
    "cancel": decide_cancel,
    "gate": lambda t: decide_gate_decision(t, outcome=COMPLETED, decision_id="d-1"),
}


@pytest.mark.parametrize("command", sorted(DECIDERS))
@pytest.mark.parametrize("state", TASK_STATES)
def test_every_command_in_every_state(command, state):
    current = task(state)
    if state in ALLOWED_FROM[command]:
        (event,) = DECIDERS[command](current)
        assert evolve(current, event).version == current.version + 1
    else:
        with pytest.raises(IllegalTransition) as raised:
            DECIDERS[command](current)
        assert raised.value.code == "illegal_transition"


def test_final_states_accept_no_command():
    for state in FINAL_STATES:
        assert not any(state in allowed for allowed in ALLOWED_FROM.values())


def test_only_the_gate_decision_produces_completed():
    produced = {
        type(event)
        for command, decide in DECIDERS.items()
        if command != "gate"
        for state in TASK_STATES
        if state in ALLOWED_FROM[command]
        for event in decide(task(state))
    }
    assert TaskCompleted not in produced
    running = task(RUNNING)
    outcomes = {
        outcome: evolve(running, decide_gate_decision(running, outcome=outcome, decision_id="d")[0]).state
        for outcome in (COMPLETED, FAILED, BLOCKED)
    }
    assert outcomes == {COMPLETED: COMPLETED, FAILED: FAILED, BLOCKED: BLOCKED}
    with pytest.raises(ValidationFailed):
        decide_gate_decision(running, outcome="cancelled", decision_id="d")
    with pytest.raises(ValidationFailed):
        decide_gate_decision(running, outcome=COMPLETED, decision_id="")


def test_a_reason_is_bounded():
    with pytest.raises(ValidationFailed) as raised:
        decide_fail(task(RUNNING), reason="x" * 2001)
    assert raised.value.field == "reason"


def test_replay_folds_a_stream_and_events_round_trip():
    created = TaskCreated(
        task_id="t-1",
        goal_id="g-1",
        parent_id="g-1",
        parent_key=None,
        key="s1",
        ordinal=1,
        objective="x",
        inputs=(),
        constraints=(),
        success_criteria=(),
        risk="low",
        depends_on=(),
    )
    assert event_from_data("TaskCreated", event_to_data(created)) == created
    state = replay([created])
    events = [*decide_start(state, dependency_states={})]
    state = replay([created, *events])
    events += decide_fail(state)
    state = replay([created, *events])
    events += decide_start(state, dependency_states={})
    final = replay([created, *events])
    assert (final.state, final.attempt, final.version) == (RUNNING, 2, 4)
    with pytest.raises(ValueError):
        evolve(None, events[0])
    with pytest.raises(ValueError):
        evolve(final, created)


@pytest.mark.parametrize(
    ("states", "goal"),
    [
        ([], PENDING),
        ([PENDING, PENDING], PENDING),
        ([COMPLETED, PENDING], RUNNING),
        ([CANCELLED, PENDING], PENDING),
        ([RUNNING, PENDING], RUNNING),
        ([RUNNING, FAILED], FAILED),
        ([FAILED, BLOCKED, RUNNING], BLOCKED),
        ([COMPLETED, COMPLETED], COMPLETED),
        ([COMPLETED, CANCELLED], COMPLETED),
        ([CANCELLED, CANCELLED], CANCELLED),
    ],
)
def test_a_goals_state_is_derived_from_its_tasks(states, goal):
    assert derive_goal_state(count_states(states)) == goal
