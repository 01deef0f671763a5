"""A browser follows the event stream (issue 29): a page of another origin, allowed by NEXUM_CORS_ORIGINS,
asks for a stream ticket with ``fetch`` (a POST with a bearer header: the browser sends it only after a
CORS preflight that allows it), opens an
``EventSource`` with it, and receives the project's events, those appended while it is open included; when
a stream closes it asks for a new ticket and resumes after the last id, so every event arrives once, in
order.

The page's origin is ``http://127.0.0.1:<port>`` and the API's ``http://localhost:<port>`` (the live
server): two origins of one server, both loopback as Chromium's local-network checks want. The script runs
in a page of the first origin (the health answer); what it calls is the browser's own fetch and
EventSource."""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

import pytest

from context_app.world.services.records import progress_record
from context_app.world.services.scopes import scope_resolve
from nexum.eventstore import reading
from tasks_app.services.goals import goal_create
from tasks_app.services.tokens import agent_token_issue

pytestmark = [pytest.mark.django_db(transaction=True)]

FOLLOW = """
const api = API, token = TOKEN;
window.received = []; window.tickets = 0; window.failures = [];
let last = 0;
async function follow() {
  const answer = await fetch(api + "/api/v1/events/stream/tickets", {
    method: "POST", headers: {"Authorization": "Bearer " + token},
  });
  if (answer.status !== 201) { window.failures.push("ticket " + answer.status); return; }
  const issued = await answer.json();
  window.tickets += 1;
  const stream = new EventSource(api + issued.stream_url + "&timeout=1&after=" + last);
  stream.addEventListener("error", () => {
    // The stream closed after its timeout: a ticket opens one stream, so ask for another and resume.
    stream.close();
    if (window.tickets < MAX_TICKETS) follow();
  });
  for (const type of TYPES) {
    stream.addEventListener(type, (message) => {
      last = Number(message.lastEventId);
      window.received.push({id: last, type: message.type, data: JSON.parse(message.data)});
    });
  }
}
follow();
"""


def _wait_until(condition, what: str, console: list[str], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; the page's console: {console}")
        time.sleep(0.1)


def test_a_page_of_an_allowed_origin_follows_the_stream_with_eventsource_and_a_ticket(
    live_server, page, project, settings
):
    settings.NEXUM_EVENT_STREAM_MAX_S = 5  # the tests' default closes every stream at once
    settings.NEXUM_EVENT_STREAM_POLL_S = 0.1
    api = live_server.url.replace("127.0.0.1", "localhost")
    port = urlsplit(api).port
    page_origin = f"http://127.0.0.1:{port}"
    settings.NEXUM_CORS_ORIGINS = [page_origin]
    key = agent_token_issue(project_id=str(project.id), name="browser", role="agent", actor="test").key
    goal = goal_create(
        project_id=str(project.id), objective="Ship", tasks=[{"key": "s1", "objective": "A"}], actor="test"
    )
    created = [event.event_type for event in reading.read_all(project_id=str(project.id))]
    types = sorted({*created, "ProgressRecorded"})
    script = (
        FOLLOW.replace("API", json.dumps(api))
        .replace("TOKEN", json.dumps(key))
        .replace("TYPES", json.dumps(types))
        .replace("MAX_TICKETS", "20")
    )

    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.goto(f"{page_origin}/api/v1/health")  # any page of that origin: the script runs in it
    page.evaluate(script)
    _wait_until(
        lambda: page.evaluate("window.received.length") >= 1, "the events already in the log", console
    )
    scope = scope_resolve(project_id=str(project.id), goal_id=str(goal.id))
    for text in ("a quarter", "halfway", "done"):
        progress_record(scope=scope, text=text, actor="test")
    _wait_until(
        lambda: page.evaluate("window.received.length") >= len(created) + 3,
        "the events appended while open",
        console,
    )
    _wait_until(
        lambda: page.evaluate("window.tickets") >= 2, "a second ticket after the first stream closed", console
    )
    progress_record(scope=scope, text="after a reconnect", actor="test")
    _wait_until(
        lambda: page.evaluate("window.received.length") >= len(created) + 4,
        "the event after a reconnect",
        console,
    )

    received = page.evaluate("window.received")
    assert page.evaluate("window.failures") == []
    logged = list(reading.read_all(project_id=str(project.id)))
    assert [message["id"] for message in received] == [event.project_position for event in logged]
    assert [message["type"] for message in received] == [*created, *["ProgressRecorded"] * 4]
    assert received[-1]["data"]["data"]["text"] == "after a reconnect"

    settings.NEXUM_CORS_ORIGINS = []  # the same page, its origin no longer allowed: the browser refuses
    refused = page.evaluate(
        """async ([api, token]) => {
          try {
            await fetch(api + "/api/v1/events/stream/tickets",
                        {method: "POST", headers: {"Authorization": "Bearer " + token}});
            return "answered";
          } catch (error) { return "blocked"; }
        }""",
        [api, key],
    )
    assert refused == "blocked"
