"""Read models are rebuildable from the log (SPEC E5, E6)."""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexum.core.roles import ROLES
from nexum.eventstore import projections, reading
from tasks_app.models import AgentToken, Project
from tasks_app.services.projects import project_create
from tasks_app.services.tokens import agent_token_issue, agent_token_revoke

# A random world: create projects, issue agents' and operators' tokens in any project so far, revoke any
# token so far.
commands = st.lists(
    st.one_of(
        st.tuples(st.just("project"), st.integers(0, 10_000)),
        st.tuples(st.just("token"), st.integers(0, 50)),
        st.tuples(st.just("revoke"), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=25,
)


def run(script) -> None:
    for step, (kind, n) in enumerate(script):
        projects = list(Project.objects.order_by("slug"))
        tokens = list(AgentToken.objects.order_by("name"))
        if kind == "project" or not projects:
            if not Project.objects.filter(slug=f"p{n}").exists():
                project_create(slug=f"p{n}", name=f"Project {n}", actor="test")
        elif kind == "token":
            agent_token_issue(
                project_id=str(projects[n % len(projects)].id),
                name=f"caller-{step}",
                role=ROLES[n % len(ROLES)],
                actor="t",
            )
        elif tokens:
            agent_token_revoke(token_id=str(tokens[n % len(tokens)].id), reason="test", actor="test")


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=commands)
def test_rebuilt_read_models_equal_the_live_ones(script):
    with transaction.atomic():
        run(script)
        live = projections.snapshot()
        assert any(live.values())
        projections.rebuild()
        assert projections.snapshot() == live
        transaction.set_rollback(True)


@pytest.mark.django_db
def test_the_command_rebuilds_and_reports(capsys):
    project_create(slug="acme", name="Acme", actor="test")
    live = projections.snapshot()
    call_command("rebuild_projections", "--no-progress")
    assert projections.snapshot() == live
    assert "replayed 1 events" in capsys.readouterr().out


@pytest.mark.django_db
def test_state_as_of_a_position_and_back():
    first = project_create(slug="first", name="First", actor="test")
    position = reading.head_position()
    project_create(slug="second", name="Second", actor="test")
    agent_token_issue(project_id=str(first.id), name="late-agent", actor="test")
    live = projections.snapshot()
    with projections.state_as_of(position):
        assert list(Project.objects.values_list("slug", flat=True)) == ["first"]
        assert not AgentToken.objects.exists()
    assert projections.snapshot() == live


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_other_requests_go_on_while_a_replay_holds_an_older_state():
    """A replay (``state_as_of``) neither empties nor locks the live read models: another connection reads
    and appends meanwhile, and never waits for it (PostgreSQL; SQLite serializes writers by design)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: SQLite has one writer at a time")
    first = project_create(slug="first", name="First", actor="test")
    position = reading.head_position()
    project_create(slug="second", name="Second", actor="test")
    inside, leave = threading.Event(), threading.Event()
    seen_inside: list[str] = []

    def replay() -> None:
        try:
            with projections.state_as_of(position):
                seen_inside.extend(Project.objects.values_list("slug", flat=True))
                inside.set()
                leave.wait(30)
        finally:
            inside.set()
            connection.close()

    replaying = threading.Thread(target=replay)
    replaying.start()
    try:
        assert inside.wait(30)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '5s'")
            assert set(Project.objects.values_list("slug", flat=True)) == {"first", "second"}
            agent_token_issue(project_id=str(first.id), name="meanwhile", actor="test")
    finally:
        leave.set()
        replaying.join(30)
    assert seen_inside == ["first"]
    assert AgentToken.objects.filter(name="meanwhile").exists()


@pytest.mark.django_db
def test_rebuild_until_a_position_via_the_command():
    project_create(slug="first", name="First", actor="test")
    position = reading.head_position()
    project_create(slug="second", name="Second", actor="test")
    call_command("rebuild_projections", "--until", str(position), "--no-progress")
    assert list(Project.objects.values_list("slug", flat=True)) == ["first"]
    call_command("rebuild_projections", "--no-progress")
    assert Project.objects.count() == 2


@pytest.mark.django_db
def test_an_old_schema_version_in_the_log_is_upcast_on_read_and_rebuild():
    """A ProjectCreated stored at schema version 1 (no description) still rebuilds its project."""
    from django.utils import timezone

    from nexum.eventstore.models import Event

    Event.objects.create(
        stream_id="project-5b0b1c1e-0000-4000-8000-000000000001",
        version=1,
        event_type="ProjectCreated",
        schema_version=1,
        data={"project_id": "5b0b1c1e-0000-4000-8000-000000000001", "slug": "legacy", "name": "Legacy"},
        metadata={"actor": "v1"},
        project_id="5b0b1c1e-0000-4000-8000-000000000001",
        project_position=1,
        recorded_at=timezone.now(),
    )
    (stored,) = reading.read_stream("project-5b0b1c1e-0000-4000-8000-000000000001")
    assert stored.event.description == ""
    projections.rebuild()
    assert Project.objects.get(slug="legacy").description == ""


@pytest.mark.django_db
def test_a_token_issued_before_roles_rebuilds_as_an_agents_token():
    """An AgentTokenIssued stored at schema version 1 (no role) is an agent's token, live and rebuilt."""
    from django.utils import timezone

    from nexum.eventstore.models import Event as Event

    project = project_create(slug="legacy", name="Legacy", actor="test")
    Event.objects.create(
        stream_id=f"project-{project.id}",
        version=2,
        event_type="AgentTokenIssued",
        schema_version=1,
        data={
            "token_id": "5b0b1c1e-0000-4000-8000-000000000002",
            "name": "old-agent",
            "key_prefix": "nx_old",
            "key_sha256": "a" * 64,
        },
        metadata={"actor": "v1"},
        project_id=str(project.id),
        project_position=reading.project_head(str(project.id))[1] + 1,
        recorded_at=timezone.now(),
    )
    projections.rebuild()
    assert AgentToken.objects.get(name="old-agent").role == "agent"
    issued = agent_token_issue(project_id=str(project.id), name="planner", role="operator", actor="test")
    assert issued.token.role == "operator"
    live = projections.snapshot()
    projections.rebuild()
    assert projections.snapshot() == live


@pytest.mark.django_db
def test_the_usage_ledger_rebuilds_to_the_live_rows(project, api):
    """``UsageProjection``: reports of two contexts, one with a cost, rebuild to the rows they made live."""
    from context_app.compilation.models import ContextUsage
    from tests.integration.compile_world import build_auth_world

    world = build_auth_world(project, filler=2, tools=1)
    url = f"/api/v1/tasks/{world.task.id}/compile"
    digests = [
        api.post(url, {"model": word}, format="json").json()["context"]["digest"]
        for word in ("quick", "best")
    ]
    for digest, cost in zip(digests, (0.5, None), strict=True):
        body = {"prompt_tokens": 900, "completion_tokens": 12, "provider": "p", "model": "m", "cost": cost}
        assert api.post(f"/api/v1/contexts/{digest}/usage", body, format="json").status_code == 201
    live = projections.snapshot()
    assert len(live[ContextUsage._meta.db_table]) == ContextUsage.objects.count() == 2
    projections.rebuild()
    assert projections.snapshot() == live
