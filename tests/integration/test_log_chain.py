"""The log's hash chain (issue 27): every append links its event to the one before it in its project, an
untouched log verifies, and an event changed by the table's owner past the append-only trigger is found and
named by ``nexum_verify_log``, which records each run for the dashboard."""

from __future__ import annotations

import io
import itertools

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from nexum.core import chain
from nexum.eventstore.models import Event, LogVerification
from nexum.eventstore.verification import chained_events
from tasks_app.services.goals import goal_create

pytestmark = pytest.mark.postgres


def _goal(project, key: str):
    return goal_create(
        project_id=str(project.id),
        objective=f"goal {key}",
        tasks=[{"key": "a", "objective": "first"}, {"key": "b", "objective": "second", "depends_on": ["a"]}],
        actor="test",
    )


def _as_owner_update_data(position: int) -> None:
    """What a database owner can do: change an event past the append-only trigger."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ALTER TABLE nexum_event DISABLE TRIGGER nexum_event_no_update_or_delete")
            cursor.execute(
                "UPDATE nexum_event SET data = jsonb_set(data, '{objective}', '\"altered\"')"
                " WHERE position = %s",
                [position],
            )
            cursor.execute("ALTER TABLE nexum_event ENABLE TRIGGER nexum_event_no_update_or_delete")
        else:
            cursor.execute("DROP TRIGGER nexum_event_no_update")
            cursor.execute(
                "UPDATE nexum_event SET data = json_set(data, '$.objective', 'altered') WHERE position = %s",
                [position],
            )
            cursor.execute(
                "CREATE TRIGGER nexum_event_no_update BEFORE UPDATE ON nexum_event "
                "BEGIN SELECT RAISE(ABORT, 'nexum_event is append-only: UPDATE refused'); END"
            )


def test_each_append_links_to_the_project_head(project, other_project):
    _goal(project, "one")
    _goal(other_project, "two")
    _goal(project, "three")
    for owner in (project, other_project):
        events = list(chained_events(str(owner.id)))
        assert [event.project_position for event in events] == list(range(1, len(events) + 1))
        assert events[0].previous_hash == chain.GENESIS
        for before, after in itertools.pairwise(events):
            assert after.previous_hash == before.event_hash
        assert chain.first_break(events) is None


def test_an_untouched_log_verifies_and_the_run_is_recorded(project, other_project):
    _goal(project, "one")
    _goal(other_project, "two")
    out = io.StringIO()
    call_command("nexum_verify_log", stdout=out)
    total = Event.objects.count()
    assert f"{total} events" in out.getvalue()
    run = LogVerification.objects.get()
    assert (run.ok, run.events, run.project_id, run.message) == (True, total, None, "")
    call_command("nexum_verify_log", project="acme", stdout=io.StringIO())
    latest = LogVerification.objects.order_by("-id").first()
    assert (latest.ok, latest.project_id, latest.projects) == (True, project.id, 1)
    assert latest.events == Event.objects.filter(project_id=project.id).count()


def test_an_event_changed_by_the_owner_is_found_and_named(project, other_project):
    _goal(other_project, "untouched")
    created = _goal(project, "victim")
    _goal(project, "after")
    victim = Event.objects.get(stream_id=f"goal-{created.id}", event_type="GoalCreated")
    _as_owner_update_data(victim.position)
    with pytest.raises(CommandError) as refused:
        call_command("nexum_verify_log", stdout=io.StringIO())
    message = str(refused.value)
    assert f"event {victim.position} (GoalCreated) of project {project.id}" in message
    assert f"at project position {victim.project_position}" in message
    assert "does not hash to its stored event_hash" in message
    run = LogVerification.objects.get()
    assert (run.ok, run.broken_position, run.broken_project_id, run.broken_event_type) == (
        False,
        victim.position,
        project.id,
        "GoalCreated",
    )
    assert run.broken_project_position == victim.project_position
    # The other project's chain is intact.
    call_command("nexum_verify_log", project="globex", stdout=io.StringIO())


def test_verify_log_names_an_unknown_project(db):
    with pytest.raises(CommandError, match="nope"):
        call_command("nexum_verify_log", project="nope")
    assert not LogVerification.objects.exists()


def test_the_dashboard_shows_the_last_verification(project, admin_client):
    response = admin_client.get("/admin/")
    assert "never been verified" in response.content.decode()
    call_command("nexum_verify_log", stdout=io.StringIO())
    page = admin_client.get("/admin/").content.decode()
    assert "Log chain verified" in page and "never been verified" not in page
    runs = admin_client.get("/admin/eventstore/logverification/")
    assert runs.status_code == 200 and "ok" in runs.content.decode()
