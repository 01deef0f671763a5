"""A project's own relevance floor (issue 24 item 3): read by any token, set by an operator through the API
(an event) or the admin, applied and recorded by the project's compiles, replayed as recorded."""

from __future__ import annotations

import pytest

from context_app.compilation.models import StoredContext
from context_app.compilation.services.replays import context_replay
from context_app.world.services.facts import fact_record
from context_app.world.services.scopes import scope_resolve
from nexum.core.compilation.model import DEFAULT_RELEVANCE_FLOOR
from nexum.eventstore import reading
from nexum.eventstore.models import Event
from tasks_app.models import Project
from tests.integration.compile_world import build_auth_world

pytestmark = pytest.mark.django_db

URL = "/api/v1/project/compile-settings"


@pytest.fixture
def auth(project):
    return build_auth_world(project, filler=30)


def floor_events(project) -> int:
    return Event.objects.filter(event_type="ProjectRelevanceFloorSet", project_id=project.id).count()


def compile_quick(api, auth) -> dict:
    answer = api.post(f"/api/v1/tasks/{auth.task.id}/compile", {"model": "frontier"}, format="json")
    assert answer.status_code == 200, answer.json()
    return answer.json()["context"]


def recorded_floor(digest: str) -> float | None:
    context = StoredContext.objects.get(digest=digest)
    events = reading.read_stream(f"compile-{context.request_id}")
    return [stored.event for stored in events][-1].relevance_floor


def test_any_token_reads_the_settings_and_the_default_applies(api, project, settings):
    settings.NEXUM_RELEVANCE_FLOOR = 0.05
    answer = api.get(URL)
    assert answer.status_code == 200
    assert answer.json() == {
        "relevance_floor": None,
        "effective_relevance_floor": 0.05,
        "version": Project.objects.get(id=project.id).version,
    }


def test_an_agent_may_not_set_the_floor_and_nothing_is_written(api, project):
    answer = api.put(URL, {"relevance_floor": 0.5}, format="json")
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"
    assert "relevance floor" in answer.json()["error"]["message"]
    assert floor_events(project) == 0


@pytest.mark.parametrize("value", [1.5, -0.1, "0.2", True, {"x": 1}])
def test_a_bad_floor_is_refused_naming_the_member_and_nothing_is_written(operator_api, project, value):
    answer = operator_api.put(URL, {"relevance_floor": value}, format="json")
    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["field"] == "relevance_floor"
    assert floor_events(project) == 0 and Project.objects.get(id=project.id).relevance_floor is None


def test_an_unknown_member_or_a_missing_floor_is_refused(operator_api, project):
    assert operator_api.put(URL, {"relevance": 0.2}, format="json").status_code == 400
    assert operator_api.put(URL, {}, format="json").status_code == 400
    assert floor_events(project) == 0


def test_the_compile_uses_the_projects_floor_records_it_and_replays(api, operator_api, auth, project):
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    fact_record(scope=scope, text="Make auth_spec.rb pass: spec/auth_spec.rb fails at line 48", actor="test")
    before = compile_quick(api, auth)
    assert recorded_floor(before["digest"]) == DEFAULT_RELEVANCE_FLOOR
    assert before["exclusions"]["by_reason"].get("below_relevance", 0) > 0
    answer = operator_api.put(URL, {"relevance_floor": 0}, format="json")  # this project wants no floor
    assert answer.status_code == 200
    assert answer.json()["relevance_floor"] == 0 and answer.json()["effective_relevance_floor"] == 0
    assert floor_events(project) == 1
    assert operator_api.put(URL, {"relevance_floor": 0}, format="json").status_code == 200
    assert floor_events(project) == 1  # the same value again writes nothing
    lowered = compile_quick(api, auth)
    assert recorded_floor(lowered["digest"]) == 0
    assert lowered["exclusions"]["by_reason"].get("below_relevance", 0) == 0
    assert len(lowered["included"]) > len(before["included"])
    for digest in (before["digest"], lowered["digest"]):
        assert context_replay(project_id=auth.project_id, digest=digest).matches
    cleared = operator_api.put(URL, {"relevance_floor": None}, format="json").json()
    assert cleared["relevance_floor"] is None
    assert cleared["effective_relevance_floor"] == DEFAULT_RELEVANCE_FLOOR
    assert recorded_floor(compile_quick(api, auth)["digest"]) == DEFAULT_RELEVANCE_FLOOR


def test_the_admin_shows_and_sets_the_floor_as_an_event(admin_client, project):
    page = admin_client.get(f"/admin/tasks_app/project/{project.pk}/change/")
    assert page.status_code == 200 and "relevance_floor" in page.content.decode()
    refused = admin_client.post(f"/admin/tasks_app/project/{project.pk}/change/", {"relevance_floor": "2"})
    assert refused.status_code == 200 and "a number from 0 to 1" in refused.content.decode()
    assert floor_events(project) == 0
    saved = admin_client.post(f"/admin/tasks_app/project/{project.pk}/change/", {"relevance_floor": "0.25"})
    assert saved.status_code == 302
    assert Project.objects.get(id=project.id).relevance_floor == 0.25 and floor_events(project) == 1
    actor = Event.objects.get(event_type="ProjectRelevanceFloorSet").metadata["actor"]
    assert actor == "admin:admin"
