"""Clients see positions in their project's log (issue 26): the feed's and the stream's ``position`` is
gapless within the project whatever other projects append, ``log_position`` is the event's identity in the
whole log, and a cursor past the project's last event (one kept from before positions were counted per
project) is 404 ``not_found`` naming the parameter, never a silent skip."""

from __future__ import annotations

import pytest

from nexum.eventstore import reading
from tests.api.test_foundation_api import assert_error

FEED = "/api/v1/events"
STREAM = "/api/v1/events/stream"


def plan(client, objective: str) -> None:
    response = client.post(
        "/api/v1/goals", {"objective": objective, "tasks": [{"key": "s1", "objective": "A"}]}, format="json"
    )
    assert response.status_code == 201, response.content


@pytest.mark.django_db
def test_the_feed_numbers_each_project_gaplessly_while_another_project_appends(api, other_api, project):
    for n in range(3):
        plan(api, f"Mine {n}")
        plan(other_api, f"Theirs {n}")
    results, cursor = [], None
    while True:
        page = api.get(FEED, {"limit": 4} | ({"cursor": cursor} if cursor else {})).json()
        results.extend(page["results"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [event["position"] for event in results] == list(range(1, len(results) + 1))
    stored = reading.read_project(str(project.id))
    assert [event["log_position"] for event in results] == [event.position for event in stored]
    assert results[-1]["log_position"] > results[-1]["position"]  # the other project's events are between


@pytest.mark.django_db
def test_a_cursor_past_the_projects_last_event_is_not_found(api, other_api, project):
    plan(api, "Mine")
    plan(other_api, "Theirs")
    head = reading.project_head(str(project.id))[1]
    assert api.get(FEED, {"cursor": head}).json() == {"results": [], "next_cursor": None}
    error = assert_error(api.get(FEED, {"cursor": head + 1}), 404, "not_found", field="cursor")
    assert "counted per project" in error["message"] and f"({head})" in error["message"]
    assert_error(api.get(STREAM, {"after": head + 1, "timeout": 0}), 404, "not_found", field="after")
    assert_error(
        api.get(STREAM, {"timeout": 0}, HTTP_LAST_EVENT_ID=str(head + 1)),
        404,
        "not_found",
        field="Last-Event-ID",
    )
    opened = api.get(STREAM, {"after": head, "timeout": 0})
    assert opened.status_code == 200
    b"".join(opened.streaming_content)  # read to its end, as a client would: the stream gives its place back
