"""The event store's guarantees (SPEC E1–E4), on SQLite locally and PostgreSQL in CI."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import DatabaseError, connection, connections, transaction

from nexum.core import chain
from nexum.core.errors import ConcurrencyError, ValidationFailed
from nexum.core.events import InvalidEvent
from nexum.core.tasks.projects import HealthPinged
from nexum.eventstore import reading, store
from nexum.eventstore.models import AppendOnlyError, Event
from nexum.eventstore.store import IdempotencyKeyReused
from nexum.eventstore.verification import chained_events


def ping(n: int | str = 0) -> HealthPinged:
    return HealthPinged(ping_id=str(n))


def new_stream() -> str:
    return f"test-{uuid.uuid4()}"


@pytest.mark.django_db
def test_append_assigns_versions_and_increasing_positions():
    stream = new_stream()
    first = store.append(stream_id=stream, events=[ping(1), ping(2)], expected_version=0)
    second = store.append(stream_id=stream, events=[ping(3)], expected_version=2, actor="me")
    assert first.stream_version == 2 and second.stream_version == 3
    assert first.positions[0] < first.positions[1] < second.positions[0]
    events = reading.read_stream(stream)
    assert [e.version for e in events] == [1, 2, 3]
    assert [e.event.ping_id for e in events] == ["1", "2", "3"]
    assert events[2].metadata["actor"] == "me"


@pytest.mark.django_db
def test_wrong_expected_version_writes_nothing():
    stream = new_stream()
    store.append(stream_id=stream, events=[ping()], expected_version=0)
    before = Event.objects.count()
    with pytest.raises(ConcurrencyError) as raised:
        store.append(stream_id=stream, events=[ping()], expected_version=0)
    assert raised.value.details["current_version"] == 1
    assert Event.objects.count() == before


@pytest.mark.django_db
def test_an_append_after_a_rolled_back_one_links_to_the_committed_head():
    stream = new_stream()
    store.append(stream_id=stream, events=[ping(1)], expected_version=0)
    with pytest.raises(RuntimeError), transaction.atomic():
        store.append(stream_id=stream, events=[ping(2)], expected_version=1)
        raise RuntimeError("the caller's transaction fails after the append")
    last = store.append(stream_id=stream, events=[ping(3)], expected_version=1)
    assert [event.data["ping_id"] for event in reading.read_stream(stream)] == ["1", "3"]
    events = list(chained_events(None))
    assert [event.project_position for event in events] == list(range(1, len(events) + 1))
    assert chain.first_break(events) is None
    assert last.project_positions == (events[-1].project_position,)


@pytest.mark.django_db
def test_same_idempotency_key_ten_times_stores_one_event():
    stream = new_stream()
    results = [
        store.append(stream_id=stream, events=[ping("x")], expected_version=0, idempotency_key="req-1")
        for _ in range(10)
    ]
    assert Event.objects.filter(stream_id=stream).count() == 1
    assert {r.positions for r in results} == {results[0].positions}
    assert [r.replayed for r in results] == [False] + [True] * 9


@pytest.mark.django_db
def test_reusing_an_idempotency_key_for_other_events_is_a_conflict():
    stream = new_stream()
    store.append(stream_id=stream, events=[ping("x")], expected_version=0, idempotency_key="req-1")
    with pytest.raises(IdempotencyKeyReused):
        store.append(stream_id=stream, events=[ping("y")], expected_version=None, idempotency_key="req-1")


@pytest.mark.django_db
def test_a_batch_with_one_invalid_event_stores_nothing():
    stream = new_stream()
    batch = [ping(i) for i in range(99)] + [HealthPinged(ping_id=42)]  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent):
        store.append(stream_id=stream, events=batch, expected_version=0)
    assert Event.objects.filter(stream_id=stream).count() == 0


@pytest.mark.django_db
def test_a_batch_failing_in_its_projection_stores_nothing(monkeypatch):
    from nexum.eventstore import projections

    def explode(stored):
        raise RuntimeError("projection failed")

    monkeypatch.setattr(projections, "apply", explode)
    stream = new_stream()
    with pytest.raises(RuntimeError):
        store.append(stream_id=stream, events=[ping(i) for i in range(100)], expected_version=0)
    assert Event.objects.filter(stream_id=stream).count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"stream_id": ""}, "stream_id"),
        ({"stream_id": "x" * 201}, "stream_id"),
        ({"events": []}, "events"),
        ({"expected_version": -1}, "expected_version"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"actor": ""}, "actor"),
        ({"actor": object()}, "actor"),
    ],
)
def test_bad_append_arguments_are_refused(kwargs, field):
    arguments = {"stream_id": new_stream(), "events": [ping()], "expected_version": 0, **kwargs}
    with pytest.raises(ValidationFailed) as raised:
        store.append(**arguments)
    assert raised.value.field == field


def _in_thread(function):
    """Run ``function`` with its own database connection, closed afterwards."""

    def run(*args):
        try:
            return function(*args)
        finally:
            connections.close_all()

    return run


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_appends_at_one_version_exactly_one_wins():
    stream = new_stream()
    store.append(stream_id=stream, events=[ping("seed")], expected_version=0)
    barrier = threading.Barrier(50)

    @_in_thread
    def attempt(n: int) -> str:
        barrier.wait()
        try:
            store.append(stream_id=stream, events=[ping(n)], expected_version=1)
            return "won"
        except ConcurrencyError:
            return "conflict"

    with ThreadPoolExecutor(max_workers=50) as pool:
        outcomes = list(pool.map(attempt, range(50)))
    assert outcomes.count("won") == 1
    assert outcomes.count("conflict") == 49
    assert [e.version for e in reading.read_stream(stream)] == [1, 2]


@pytest.mark.django_db(transaction=True)
def test_a_tailing_reader_never_misses_an_event():
    """4 writers × 200 appends to their own streams while a reader tails ``after=P``."""
    writers, appends = 4, 200
    done = threading.Event()
    seen: list[int] = []

    @_in_thread
    def write(n: int) -> None:
        stream = new_stream()
        for i in range(appends):
            store.append(stream_id=stream, events=[ping(f"{n}-{i}")], expected_version=i)

    @_in_thread
    def tail() -> None:
        after = 0
        while True:
            finished = done.is_set()
            page = reading.read_all(after=after, limit=500)
            seen.extend(e.position for e in page)
            if page:
                after = page[-1].position
            elif finished:
                return
            else:
                time.sleep(0.005)  # as a tailing reader polls; spinning would starve the writers of the GIL

    reader = threading.Thread(target=tail)
    reader.start()
    with ThreadPoolExecutor(max_workers=writers) as pool:
        list(pool.map(write, range(writers)))
    done.set()
    reader.join(timeout=120)
    assert not reader.is_alive()
    everything = list(Event.objects.order_by("position").values_list("position", flat=True))
    assert len(everything) == writers * appends
    assert seen == everything


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "statement", ["UPDATE nexum_event SET event_type = 'Forged'", "DELETE FROM nexum_event"]
)
def test_raw_sql_cannot_change_or_remove_events(statement):
    store.append(stream_id=new_stream(), events=[ping()], expected_version=0)
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement)
    assert Event.objects.filter(event_type="HealthPinged").count() == 1


@pytest.mark.django_db
def test_an_appends_statements_are_prepared_on_its_connection_not_planned_every_time():
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    stream = new_stream()
    for version in range(8):
        store.append(stream_id=stream, events=[ping(version)], expected_version=version)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("pg_advisory_xact_lock" in statement for statement in prepared)
    assert any("SELECT project_position, event_hash FROM nexum_event" in statement for statement in prepared)
    assert any(statement.startswith("INSERT INTO nexum_event") for statement in prepared)


@pytest.mark.django_db(transaction=True)
def test_truncate_is_refused_on_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no TRUNCATE")
    store.append(stream_id=new_stream(), events=[ping()], expected_version=0)
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("TRUNCATE nexum_event")
    assert Event.objects.count() == 1


@pytest.mark.django_db
def test_the_model_layer_refuses_changes():
    store.append(stream_id=new_stream(), events=[ping()], expected_version=0)
    row = Event.objects.get()
    row.event_type = "Forged"
    with pytest.raises(AppendOnlyError):
        row.save()
    with pytest.raises(AppendOnlyError):
        row.delete()
    with pytest.raises(AppendOnlyError):
        Event.objects.all().update(event_type="Forged")
    with pytest.raises(AppendOnlyError):
        Event.objects.all().delete()
    assert Event.objects.get().event_type == "HealthPinged"
