"""Compiles without a log-wide lock (issue 15): two compiles of different tasks read and compile at the same
time, an append during a compile is not blocked by it, and a context compiled while events were appended
replays to its digest. PostgreSQL only: on SQLite every transaction begins with ``BEGIN IMMEDIATE``, which
serializes them by design.

Concurrency is shown with barriers and events, never with timings: a compile that held a lock the other
needed would leave the barrier broken (``BrokenBarrierError``), however fast the machine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from context_app.compilation.services import compiles
from context_app.compilation.services.replays import context_replay
from context_app.world.services.records import progress_record, tool_call_record
from context_app.world.services.scopes import scope_resolve
from nexum.eventstore.models import Event
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start
from tests.integration.compile_world import build_auth_world

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="SQLite serializes every transaction (BEGIN IMMEDIATE)"
    ),
]

WAIT = 60  # seconds a barrier or a thread is given before the test calls the other side stuck


class Outcome:
    """What a thread returned or raised."""

    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None


def in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, Outcome]:
    outcome = Outcome()

    def run() -> None:
        try:
            outcome.value = target()
        except BaseException as error:  # handed to the test thread
            outcome.error = error
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def finished(thread: threading.Thread, outcome: Outcome) -> Any:
    thread.join(timeout=WAIT)
    assert not thread.is_alive()
    if outcome.error is not None:
        raise outcome.error
    return outcome.value


def compile_of(auth: Any, task: Task) -> Callable[[], compiles.CompileOutcome]:
    return lambda: compiles.context_compile(
        project_id=auth.project_id, task_id=str(task.id), model_word="local", actor="test"
    )


@pytest.fixture
def auth(project):
    return build_auth_world(project)


@pytest.fixture
def second_task(auth):
    goal = goal_create(
        project_id=auth.project_id,
        objective="Rotate the signing keys",
        tasks=[{"key": "rotate", "objective": "Rotate the token signing key"}],
        actor="test",
    )
    task = Task.objects.get(goal_id=goal.id, key="rotate")
    task_start(project_id=auth.project_id, task_id=str(task.id), actor="test")
    scope = scope_resolve(project_id=auth.project_id, task_id=str(task.id))
    progress_record(scope=scope, text="listed the keys in use", actor="test")
    return task


def test_two_compiles_of_different_tasks_proceed_concurrently(auth, second_task, monkeypatch):
    """Both compiles reach the barrier while each is inside its read and compile: neither waits for a lock
    the other holds. Both record their context."""
    barrier = threading.Barrier(2, timeout=WAIT)
    compile_task = compiles.compile_task

    def compile_then_meet(**kwargs: Any) -> Any:
        result = compile_task(**kwargs)
        barrier.wait()
        return result

    monkeypatch.setattr(compiles, "compile_task", compile_then_meet)
    first = in_thread(compile_of(auth, auth.task))
    second = in_thread(compile_of(auth, second_task))
    outcomes = [finished(*first), finished(*second)]
    assert not barrier.broken
    assert {str(outcome.context.task_id) for outcome in outcomes} == {str(auth.task.id), str(second_task.id)}
    assert Event.objects.filter(event_type="ContextCompiled").count() == 2


def test_an_append_during_a_compile_is_not_blocked(auth, monkeypatch):
    """While a compile is inside its read, another connection records a progress note of the same task and
    commits. The compile does not see it: its recorded position is below the note's, and it replays."""
    compile_task = compiles.compile_task
    appended: list[int] = []

    def compile_while_appending(**kwargs: Any) -> Any:
        def record() -> int:
            scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
            progress_record(scope=scope, text="noted during the compile", actor="test")
            return Event.objects.order_by("-position").values_list("position", flat=True).first()

        appended.append(finished(*in_thread(record)))  # joined before this compile goes on
        return compile_task(**kwargs)

    monkeypatch.setattr(compiles, "compile_task", compile_while_appending)
    outcome = compile_of(auth, auth.task)()
    monkeypatch.undo()
    assert outcome.context.position < appended[0]
    assert "noted during the compile" not in outcome.context.prompt_block
    assert context_replay(project_id=auth.project_id, digest=outcome.context.digest).matches
    later = compile_of(auth, auth.task)()
    assert "noted during the compile" in later.context.prompt_block


def test_contexts_compiled_under_concurrent_appends_replay_to_their_digests(auth):
    """A writer keeps recording notes and tool calls of the task while it is compiled again and again; every
    stored context replays, as of its recorded position, to the same digest."""
    stop = threading.Event()
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))

    def keep_writing() -> int:
        written = 0
        while not stop.is_set() and written < 400:
            progress_record(scope=scope, text=f"step {written} of the fix", actor="test")
            tool_call_record(scope=scope, tool="rspec", result_summary=f"run {written}", actor="test")
            written += 1
        return written

    writer = in_thread(keep_writing)
    try:
        contexts = [compile_of(auth, auth.task)().context for _ in range(8)]
    finally:
        stop.set()
    assert finished(*writer) > 0
    assert len({context.position for context in contexts}) > 1
    for context in contexts:
        assert context_replay(project_id=auth.project_id, digest=context.digest).matches
