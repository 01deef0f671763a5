"""The project is the unit of ordering (issue 26): every project's events carry gapless positions committed
in order, appends in different projects never wait for each other, a reader tailing one project misses
nothing, and the migration numbers the events already stored in log order."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import DatabaseError, connection, connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from nexum.core.tasks.projects import HealthPinged
from nexum.eventstore import reading, store
from nexum.eventstore.models import Event
from nexum.eventstore.verification import verify_log


def ping(n: int | str = 0) -> HealthPinged:
    return HealthPinged(ping_id=str(n))


def _in_thread(function):
    """Run ``function`` with its own database connection, closed afterwards."""

    def run(*args):
        try:
            return function(*args)
        finally:
            connections.close_all()

    return run


def _places(project_id: str | None) -> list[tuple[int, int]]:
    """The project's events as (position, project_position), in log order."""
    return list(
        Event.objects.filter(project_id=project_id)
        .order_by("position")
        .values_list("position", "project_position")
    )


@pytest.mark.django_db(transaction=True)
def test_per_project_positions_are_gapless_under_concurrent_appends_in_many_projects():
    """6 projects × 2 writers (12 threads, bounded) of single and batch appends, plus events without a
    project: each project's positions are 1..n, in the order of the log's positions."""
    projects = [str(uuid.uuid4()) for _ in range(6)] + [None]
    writers_per_project, appends = 2, 30
    start = threading.Barrier(len(projects) * writers_per_project)

    @_in_thread
    def write(project_id: str | None, writer: int) -> None:
        stream = f"test-{uuid.uuid4()}"
        start.wait()
        version = 0
        for i in range(appends):
            batch = [ping(f"{writer}-{i}-{n}") for n in range(1 + i % 3)]
            store.append(stream_id=stream, events=batch, expected_version=version, project_id=project_id)
            version += len(batch)

    jobs = [(project_id, writer) for project_id in projects for writer in range(writers_per_project)]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        list(pool.map(lambda job: write(*job), jobs))

    per_writer = sum(1 + i % 3 for i in range(appends))
    for project_id in projects:
        places = _places(project_id)
        assert len(places) == writers_per_project * per_writer
        assert [place for _, place in places] == list(range(1, len(places) + 1))
        assert reading.project_head(project_id) == places[-1]
    # Each concurrent append linked its events to the head it found under the project's lock.
    run = verify_log()
    assert run.ok and run.events == len(projects) * writers_per_project * per_writer, run.message


@pytest.mark.django_db(transaction=True)
def test_a_tailing_reader_never_misses_an_event_of_its_project():
    """3 projects, 2 writers each, while one reader per project follows ``after=`` its project's position."""
    projects = [str(uuid.uuid4()) for _ in range(3)]
    writers_per_project, appends = 2, 100
    done = threading.Event()
    seen: dict[str, list[int]] = {project_id: [] for project_id in projects}

    @_in_thread
    def write(project_id: str) -> None:
        stream = f"test-{uuid.uuid4()}"
        for i in range(appends):
            store.append(stream_id=stream, events=[ping(i)], expected_version=i, project_id=project_id)

    @_in_thread
    def tail(project_id: str) -> None:
        after = 0
        while True:
            finished = done.is_set()
            page = reading.read_project(project_id, after=after, limit=50)
            assert all(event.project_id == project_id for event in page)
            seen[project_id].extend(event.project_position for event in page)
            if page:
                after = page[-1].project_position
            elif finished:
                return

    readers = [threading.Thread(target=tail, args=(project_id,)) for project_id in projects]
    for reader in readers:
        reader.start()
    with ThreadPoolExecutor(max_workers=len(projects) * writers_per_project) as pool:
        list(pool.map(write, [project_id for project_id in projects for _ in range(writers_per_project)]))
    done.set()
    for reader in readers:
        reader.join(timeout=120)
        assert not reader.is_alive()
    for project_id in projects:
        assert seen[project_id] == list(range(1, writers_per_project * appends + 1))


@pytest.mark.django_db(transaction=True)
def test_an_append_in_another_project_does_not_wait_and_one_in_the_same_project_does():
    """While project A's append is uncommitted, B's append commits (under a lock timeout that would fail
    it had it waited), and a second append in A cannot get A's lock."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serializes every write transaction (BEGIN IMMEDIATE)")
    project_a, project_b = str(uuid.uuid4()), str(uuid.uuid4())
    holding, release = threading.Event(), threading.Event()
    outcomes: dict[str, object] = {}

    @_in_thread
    def hold_a() -> None:
        with transaction.atomic():
            store.append(
                stream_id=f"a-{uuid.uuid4()}", events=[ping()], expected_version=0, project_id=project_a
            )
            holding.set()
            release.wait(timeout=60)

    @_in_thread
    def append_with_lock_timeout(name: str, project_id: str) -> None:
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL lock_timeout = '2s'")
                result = store.append(
                    stream_id=f"{name}-{uuid.uuid4()}",
                    events=[ping()],
                    expected_version=0,
                    project_id=project_id,
                )
            outcomes[name] = result.project_positions
        except DatabaseError as error:
            outcomes[name] = error

    holder = threading.Thread(target=hold_a)
    holder.start()
    assert holding.wait(timeout=60)
    for name, project_id in (("b", project_b), ("a2", project_a)):
        thread = threading.Thread(target=append_with_lock_timeout, args=(name, project_id))
        thread.start()
        thread.join(timeout=60)
    release.set()
    holder.join(timeout=60)
    assert outcomes["b"] == (1,)
    assert isinstance(outcomes["a2"], DatabaseError) and "lock" in str(outcomes["a2"])
    assert [place for _, place in _places(project_a)] == [1]


LEGACY_EVENT = (
    "INSERT INTO nexum_event (stream_id, version, event_type, schema_version, data, metadata, project_id,"
    " recorded_at) VALUES (%s, %s, 'HealthPinged', 1, %s, '{}', %s, %s)"
)


@pytest.mark.django_db(transaction=True)
def test_the_migration_numbers_stored_events_and_webhook_positions_in_log_order():
    """Events stored before ``project_position`` existed, interleaved across two projects and the events
    without one, get their project's places in log order; a webhook's cursor and its deliveries' ids move
    from log positions to the same events' project positions; the log stays append-only."""
    before = [
        ("eventstore", "0003_owner_only_maintenance"),
        ("webhooks", "0002_attempt_recorded_first_and_due_per_project"),
    ]
    MigrationExecutor(connection).migrate(before)
    project_a, project_b = uuid.uuid4(), uuid.uuid4()
    order = [project_a, project_b, None, project_a, project_b, project_a]
    logged: list[int] = []
    field = Event._meta.get_field
    with connection.cursor() as cursor:
        for n, project_id in enumerate(order):
            cursor.execute(
                LEGACY_EVENT,
                [
                    f"legacy-{n}",
                    1,
                    f'{{"ping_id": "{n}"}}',
                    field("project_id").get_db_prep_save(project_id, connection),
                    field("recorded_at").get_db_prep_save(timezone.now(), connection),
                ],
            )
        cursor.execute("SELECT position FROM nexum_event ORDER BY position")
        logged = [row[0] for row in cursor.fetchall()]
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE nexum_event SET event_type = 'Forged'")  # reversed, still guarded
    old = MigrationExecutor(connection).loader.project_state(before).apps
    webhook = old.get_model("webhooks", "Webhook").objects.create(
        project_id=project_a, url="http://127.0.0.1/hook", secret="s", cursor=logged[3], created_by="test"
    )
    delivery_model = old.get_model("webhooks", "WebhookDelivery")
    for index in (0, 5):
        delivery_model.objects.create(
            webhook_id=webhook.id,
            project_id=project_a,
            position=logged[index],
            event_type="HealthPinged",
            requested_at=timezone.now(),
        )

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    from nexum_web.webhooks.models import Webhook, WebhookDelivery

    assert _places(str(project_a)) == [(logged[0], 1), (logged[3], 2), (logged[5], 3)]
    assert _places(str(project_b)) == [(logged[1], 1), (logged[4], 2)]
    assert _places(None) == [(logged[2], 1)]
    assert Webhook.objects.get(id=webhook.id).cursor == 2
    assert sorted(WebhookDelivery.objects.values_list("position", flat=True)) == [1, 3]
    appended = store.append(
        stream_id="legacy-0", events=[ping("next")], expected_version=1, project_id=str(project_a)
    )
    assert appended.project_positions == (4,)
    # Migration 0007 chained the stored events, project by project; the next append links to its head.
    run = verify_log()
    assert (run.ok, run.events, run.projects) == (True, 7, 3), run.message
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE nexum_event SET event_type = 'Forged'")
