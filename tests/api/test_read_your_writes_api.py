"""Read-your-writes tokens on the HTTP edge (issue 26 item 3), without a read replica: a write's answer
carries the project position it reached (``Nexum-Position``), a compile accepts it back
(``Nexum-Min-Position``) and, with no replica configured, reads from the primary as before; a malformed
token is a 400 naming the header. The replica itself: tests/integration/test_read_replica.py."""

from __future__ import annotations

import pytest

from nexum.eventstore import reading
from tests.integration.compile_world import build_auth_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def auth(project):
    return build_auth_world(project, filler=5)


@pytest.mark.django_db(transaction=True)  # the position is reported once the append has committed
def test_a_write_answers_its_project_position_and_a_compile_accepts_it_back(api, auth, project):
    recorded = api.post(
        f"/api/v1/tasks/{auth.task.id}/facts", {"text": "The cache is Redis 7.2"}, format="json"
    )
    assert recorded.status_code == 201, recorded.content
    position = int(recorded["Nexum-Position"])
    assert position == reading.project_head(str(project.id))[1]

    compiled = api.post(
        f"/api/v1/tasks/{auth.task.id}/compile",
        {"model": "quick"},
        format="json",
        HTTP_NEXUM_MIN_POSITION=str(position),
    )
    assert compiled.status_code == 200, compiled.content
    assert "The cache is Redis 7.2" in compiled.json()["context"]["prompt_block"]
    # The compile recorded ContextCompiled on the primary: its answer carries that later position.
    assert int(compiled["Nexum-Position"]) == reading.project_head(str(project.id))[1] > position
    assert "Nexum-Read-From" not in compiled  # no replica configured: nothing chose where to read


def test_a_read_carries_no_position_and_accepts_one_without_a_replica(api, auth):
    answer = api.get(f"/api/v1/tasks/{auth.task.id}")
    assert answer.status_code == 200
    assert "Nexum-Position" not in answer
    tokened = api.get(f"/api/v1/tasks/{auth.task.id}", HTTP_NEXUM_MIN_POSITION="99999")
    assert tokened.status_code == 200 and tokened.json() == answer.json()
    assert "Nexum-Read-From" not in tokened and "Server-Timing" not in tokened


@pytest.mark.parametrize("token", ["-1", "12a", "1" * 19])
def test_a_malformed_min_position_on_a_read_is_refused_naming_the_header(api, auth, token):
    answer = api.get(f"/api/v1/tasks/{auth.task.id}", HTTP_NEXUM_MIN_POSITION=token)
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["field"] == "Nexum-Min-Position"
    assert "project position" in error["message"]


@pytest.mark.parametrize("token", ["-1", "12a", "", " 3", "1" * 19])
def test_a_malformed_min_position_is_refused_naming_the_header(api, auth, token):
    answer = api.post(
        f"/api/v1/tasks/{auth.task.id}/compile",
        {"model": "quick"},
        format="json",
        HTTP_NEXUM_MIN_POSITION=token,
    )
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["field"] == "Nexum-Min-Position"
    assert "project position" in error["message"]
