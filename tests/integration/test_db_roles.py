"""The least-privilege runtime role (issue 12, SPEC E4), on PostgreSQL: created with ``nexum_db_roles``, it
appends through the service and keeps the read models, and every way to change or erase the log fails.

Roles are cluster-wide: each test run makes its own (a random name) and drops it at the end, even on failure.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from nexum.eventstore.models import Event
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start
from tasks_app.services.projects import project_create

ON_POSTGRES = "postgresql" in settings.DATABASES["default"]["ENGINE"]
pytestmark = pytest.mark.postgres
postgres_only = pytest.mark.skipif(
    not ON_POSTGRES,
    reason="database roles are a PostgreSQL feature; the embedded SQLite default has a single user",
)

PASSWORD = secrets.token_urlsafe(16)
REFUSED = "42501"  # insufficient_privilege: a missing privilege, "must be owner", or the log's own trigger


def _drop(role: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
        if cursor.fetchone():
            cursor.execute(f'DROP OWNED BY "{role}"')
            cursor.execute(f'DROP ROLE "{role}"')


@pytest.fixture
def runtime_role(transactional_db, monkeypatch) -> Iterator[str]:
    role = f"nexum_test_runtime_{secrets.token_hex(4)}"
    monkeypatch.setenv("NEXUM_TEST_RUNTIME_PASSWORD", PASSWORD)
    try:
        call_command("nexum_db_roles", runtime_role=role, password_env="NEXUM_TEST_RUNTIME_PASSWORD")
        yield role
    finally:
        _drop(role)


@pytest.fixture
def as_runtime(runtime_role) -> Iterator[psycopg.Connection]:
    """A connection of the runtime role to the test database (autocommit: each statement on its own)."""
    params = connection.get_connection_params()
    with psycopg.connect(
        host=params.get("host"),
        port=params.get("port"),
        dbname=params["dbname"],
        user=runtime_role,
        password=PASSWORD,
        autocommit=True,
    ) as runtime:
        yield runtime


def _refused(runtime: psycopg.Connection, sql: str) -> str:
    with pytest.raises(psycopg.Error) as error, runtime.cursor() as cursor:
        cursor.execute(sql)
    assert error.value.sqlstate == REFUSED, (sql, error.value)
    return str(error.value)


def _some_events() -> int:
    project_create(slug="acme", name="Acme", actor="test")
    return Event.objects.count()


@postgres_only
def test_the_runtime_role_cannot_change_or_erase_the_log(as_runtime, runtime_role):
    events = _some_events()
    for sql in (
        "UPDATE nexum_event SET data = '{}'",
        "DELETE FROM nexum_event",
        "TRUNCATE nexum_event",
        "ALTER TABLE nexum_event DISABLE TRIGGER nexum_event_no_update_or_delete",
        "ALTER TABLE nexum_event DISABLE TRIGGER ALL",
        "DROP TRIGGER nexum_event_no_update_or_delete ON nexum_event",
        "CREATE TRIGGER t BEFORE INSERT ON nexum_event FOR EACH ROW"
        " EXECUTE FUNCTION nexum_event_refuse_change()",
        "ALTER TABLE nexum_event OWNER TO CURRENT_USER",
        "SET session_replication_role = replica",
        "SELECT setval(pg_get_serial_sequence('nexum_event', 'position'), 1)",
    ):
        _refused(as_runtime, sql)
    with as_runtime.cursor() as cursor:
        cursor.execute(
            f'GRANT UPDATE, DELETE ON nexum_event TO "{runtime_role}"'
        )  # a warning: granted nothing
        cursor.execute(
            "SET nexum.event_maintenance = 'on'"
        )  # anyone may set it; it opens nothing for this role
    for sql in ("TRUNCATE nexum_event", "DELETE FROM nexum_event", "UPDATE nexum_event SET data = '{}'"):
        _refused(as_runtime, sql)
    assert Event.objects.count() == events


@postgres_only
def test_the_maintenance_flag_opens_truncate_for_the_owner_only(as_runtime, runtime_role):
    """Even a non-owner someone granted TRUNCATE cannot use the flag: the trigger asks who is truncating."""
    events = _some_events()
    with connection.cursor() as cursor:
        cursor.execute(f'GRANT TRUNCATE ON nexum_event TO "{runtime_role}"')
    with as_runtime.cursor() as cursor:
        cursor.execute("SET nexum.event_maintenance = 'on'")
    assert "append-only" in _refused(as_runtime, "TRUNCATE nexum_event")
    assert Event.objects.count() == events


@postgres_only
def test_the_runtime_role_owns_nothing_and_holds_no_special_rights(as_runtime, runtime_role):
    with as_runtime.cursor() as cursor:
        cursor.execute(
            "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls FROM pg_roles"
            " WHERE rolname = current_user"
        )
        assert cursor.fetchone() == (False, False, False, False, False)
        cursor.execute("SELECT count(*) FROM pg_class WHERE pg_get_userbyid(relowner) = current_user")
        assert cursor.fetchone() == (0,)
        cursor.execute(
            "SELECT privilege_type FROM information_schema.table_privileges"
            " WHERE grantee = current_user AND table_name = 'nexum_event' ORDER BY 1"
        )
        assert [row[0] for row in cursor.fetchall()] == ["INSERT", "SELECT"]
        cursor.execute(
            "SELECT pg_has_role(current_user, relowner, 'MEMBER') FROM pg_class WHERE relname = 'nexum_event'"
        )
        assert cursor.fetchone() == (False,)


@postgres_only
def test_the_service_appends_and_updates_projections_as_the_runtime_role(runtime_role):
    owner = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(USER=runtime_role, PASSWORD=PASSWORD)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_user")
            assert cursor.fetchone() == (runtime_role,)
        project = project_create(slug="acme", name="Acme", actor="test")
        goal = goal_create(  # an append under an idempotency key: the lock is taken first
            project_id=str(project.id),
            objective="Ship",
            tasks=[{"key": "s1", "objective": "Build"}],
            actor="test",
            idempotency_key="plan-1",
        )
        task = Task.objects.get(goal=goal, key="s1")
        started = task_start(project_id=str(project.id), task_id=str(task.id), actor="agent")
        assert (started.state, started.version) == ("running", 2)  # a read-model row updated
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(owner)
    assert Event.objects.filter(event_type="TaskStarted").count() == 1


@postgres_only
def test_the_command_prints_its_sql_and_refuses_roles_that_would_hold_too_much(transactional_db, capsys):
    role = f"nexum_test_runtime_{secrets.token_hex(4)}"
    call_command("nexum_db_roles", runtime_role=role, print_sql=True)
    printed = capsys.readouterr().out
    assert 'GRANT SELECT, INSERT ON TABLE "public"."nexum_event"' in printed
    assert "UPDATE" not in printed.split("nexum_event")[1].split(";")[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
        assert cursor.fetchone() is None  # printing changed nothing
        cursor.execute("SELECT current_user")
        owner = cursor.fetchone()[0]
    for name, reason in ((owner, "owner"), ("pg_monitor; drop", "plain role name")):
        with pytest.raises(CommandError, match=reason):
            call_command("nexum_db_roles", runtime_role=name)
    with pytest.raises(CommandError, match="NEXUM_TEST_UNSET_PASSWORD is empty or unset"):
        call_command("nexum_db_roles", runtime_role=role, password_env="NEXUM_TEST_UNSET_PASSWORD")
    try:
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE ROLE "{role}" SUPERUSER')
        with pytest.raises(CommandError, match="superuser"):
            call_command("nexum_db_roles", runtime_role=role)
    finally:
        _drop(role)


@pytest.mark.skipif(ON_POSTGRES, reason="the refusal on SQLite")
def test_the_command_says_roles_need_postgresql(db):
    with pytest.raises(CommandError, match="PostgreSQL feature"):
        call_command("nexum_db_roles", runtime_role="nexum_app")
