"""The SSE event stream (issue 18): ids are positions in the project's log, resumable with Last-Event-ID,
scoped to the caller's project, bounded per connection; with 4 writers appending, a client that
reconnects with Last-Event-ID gets every event exactly once, in order."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import httpx2
import pytest
from django.core.signals import request_finished
from django.db import close_old_connections, connection
from rest_framework.test import APIClient

from context_app.world.services.records import progress_record
from context_app.world.services.scopes import scope_resolve
from nexum.eventstore import reading
from nexum_web.api import stream_slots
from tasks_app.models import AgentToken
from tasks_app.selectors import goal_tasks
from tasks_app.services.goals import goal_create
from tasks_app.services.tokens import agent_token_issue
from tests.integration.test_worker import ROOT, database_url_for_worker, wait_for

STREAM = "/api/v1/events/stream"


def parse(text: str) -> list[dict[str, Any]]:
    """The SSE messages of ``text`` that carry an event (``id``, ``event``, ``data``)."""
    messages = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "id" in fields:
            messages.append(
                {"id": int(fields["id"]), "event": fields["event"], "data": json.loads(fields["data"])}
            )
    return messages


def read(response) -> str:
    return b"".join(response.streaming_content).decode()


@pytest.mark.django_db
def test_the_stream_resumes_after_last_event_id_within_the_project(api, other_api, project, other_project):
    goal = api.post(
        "/api/v1/goals", {"objective": "Ship", "tasks": [{"key": "s1", "objective": "A"}]}, format="json"
    )
    goal_id = goal.json()["id"]
    other_api.post(
        "/api/v1/goals", {"objective": "Theirs", "tasks": [{"key": "x", "objective": "B"}]}, format="json"
    )
    mine = [event.project_position for event in reading.read_project(str(project.id))]
    assert mine == list(range(1, len(mine) + 1))  # the project's own positions, gapless

    response = api.get(STREAM, {"timeout": 0}, HTTP_ACCEPT="text/event-stream", HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/event-stream")
    assert not response.has_header("Content-Encoding")  # each event reaches the reader as it is written
    assert response["Cache-Control"] == "no-cache"
    text = read(response)
    assert text.startswith("retry: 1000\n\n")
    messages = parse(text)
    assert [message["id"] for message in messages] == mine
    assert (
        messages[-1]["data"]["position"] == mine[-1] and messages[-1]["event"] == messages[-1]["data"]["type"]
    )

    api.post(f"/api/v1/goals/{goal_id}/progress", {"text": "halfway"}, format="json")
    resumed = parse(read(api.get(STREAM, {"timeout": 0}, HTTP_LAST_EVENT_ID=str(mine[-1]))))
    assert [message["event"] for message in resumed] == ["ProgressRecorded"]
    after = parse(read(api.get(STREAM, {"timeout": 0, "after": mine[0]})))
    assert [message["id"] for message in after][: len(mine) - 1] == mine[1:]


@pytest.mark.django_db
def test_the_stream_is_bounded_and_refuses_bad_input_in_the_error_shape(api, client, settings):
    settings.NEXUM_EVENT_STREAM_MAX_S = 1
    response = api.get(STREAM, {"timeout": 60})
    started = time.monotonic()
    text = read(response)  # held open while idle, the timeout clamped to NEXUM_EVENT_STREAM_MAX_S
    assert time.monotonic() - started < 5 and text.startswith("retry:")
    settings.NEXUM_EVENT_STREAM_MAX_S = 60
    started = time.monotonic()
    assert api.head(STREAM).status_code == 200 and time.monotonic() - started < 30  # a held stream: 60 s

    bad = api.get(STREAM, HTTP_LAST_EVENT_ID="-3", HTTP_ACCEPT="text/event-stream")
    assert bad.status_code == 400 and bad["Content-Type"] == "application/json"
    assert bad.json()["error"]["field"] == "Last-Event-ID"
    assert api.get(STREAM, {"timeout": "soon"}).json()["error"]["field"] == "timeout"
    anonymous = client.get(STREAM, HTTP_ACCEPT="text/event-stream")
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "not_authenticated"


def test_the_schema_documents_the_stream(api, db):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operation = schema["paths"][STREAM]["get"]
    assert "text/event-stream" in operation["responses"]["200"]["content"]
    assert {"after", "timeout", "Last-Event-ID"} <= {
        parameter["name"] for parameter in operation["parameters"]
    }


WRITERS = 4
EVENTS_PER_WRITER = 15


def test_every_event_once_in_order_across_reconnects_while_four_writers_append(
    live_server, transactional_db, project, settings
):
    settings.NEXUM_EVENT_STREAM_MAX_S = 1
    project_id = str(project.id)
    key = agent_token_issue(project_id=project_id, name="reader", role="agent", actor="test").key
    goal = goal_create(
        project_id=project_id, objective="Ship", tasks=[{"key": "s1", "objective": "A"}], actor="t"
    )
    task_id = str(goal_tasks(goal=goal).get().id)
    start = reading.project_head(project_id)[1]
    failures: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            scope = scope_resolve(project_id=project_id, task_id=task_id)
            for index in range(EVENTS_PER_WRITER):
                progress_record(scope=scope, text=f"writer {writer} note {index}", actor=f"agent:w{writer}")
                time.sleep(0.1)  # the writes span several of the reader's one-second connections
        except BaseException as error:  # reported by the test, not lost in the thread
            failures.append(error)
        finally:
            connection.close()

    writers = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
    for thread in writers:
        thread.start()

    received: list[int] = []
    texts: list[str] = []
    last = start
    connections_while_writing = 0
    deadline = time.monotonic() + 120
    with httpx2.Client(
        base_url=live_server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        while time.monotonic() < deadline:
            writing = any(thread.is_alive() for thread in writers)
            response = http.get(STREAM, params={"timeout": 1}, headers={"Last-Event-ID": str(last)})
            assert response.status_code == 200
            connections_while_writing += writing
            messages = parse(response.text)
            texts.extend(message["data"]["data"].get("text", "") for message in messages)
            received.extend(message["id"] for message in messages)
            if messages:
                last = messages[-1]["id"]
            if not writing and not messages:
                break
    for thread in writers:
        thread.join(timeout=60)

    assert not failures, failures
    expected = [event.project_position for event in reading.read_project(project_id, after=start)]
    assert len(expected) == WRITERS * EVENTS_PER_WRITER
    assert received == expected  # every event, exactly once, in log order
    assert connections_while_writing >= 2  # the reader reconnected while events were being appended
    for writer in range(WRITERS):
        mine = [text for text in texts if text.startswith(f"writer {writer} ")]
        assert mine == [f"writer {writer} note {index}" for index in range(EVENTS_PER_WRITER)]


# --- open streams are bounded (issue 23) --------------------------------------------------------------------


def close(response) -> None:
    """What the server does when a stream ends or its client goes: it closes the answer (as the test client
    does, leaving the test's database connection open)."""
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)


def assert_refused(response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code and error["request_id"] == response["X-Request-ID"]
    assert 1 <= int(response["Retry-After"]) <= 60
    return error


@pytest.mark.django_db
def test_a_token_has_at_most_its_share_of_open_streams_and_a_closed_one_frees_its_place(
    api, project, settings
):
    settings.NEXUM_EVENT_STREAM_MAX_S, settings.NEXUM_EVENT_STREAMS_PER_TOKEN = 30, 2
    open_streams = [api.get(STREAM, {"timeout": 30}) for _ in range(2)]
    assert [response.status_code for response in open_streams] == [200, 200]
    error = assert_refused(api.get(STREAM, {"timeout": 30}), 429, "too_many_streams")
    assert error["details"] == {"open": 2, "limit": 2, "retry_after_s": 30}
    assert "NEXUM_EVENT_STREAMS_PER_TOKEN=2" in error["message"]

    colleague = APIClient()
    key = agent_token_issue(project_id=str(project.id), name="colleague", actor="test").key
    colleague.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    theirs = colleague.get(STREAM, {"timeout": 30})
    assert theirs.status_code == 200  # a share per token, not per project

    close(open_streams.pop())
    again = api.get(STREAM, {"timeout": 0})
    assert again.status_code == 200 and read(again).startswith("retry:")
    for response in [*open_streams, theirs]:
        close(response)
    assert stream_slots.open_streams() == 0


@pytest.mark.django_db
def test_the_server_and_each_process_serve_a_bounded_number_of_streams(api, other_api, settings):
    settings.NEXUM_EVENT_STREAM_MAX_S = 30
    settings.NEXUM_EVENT_STREAMS_PER_TOKEN = settings.NEXUM_EVENT_STREAMS_MAX = 3
    held = [api.get(STREAM, {"timeout": 20}) for _ in range(2)] + [other_api.get(STREAM, {"timeout": 20})]
    assert {response.status_code for response in held} == {200}
    error = assert_refused(other_api.get(STREAM, {"timeout": 20}), 503, "streams_at_capacity")
    assert error["details"]["limit"] == 3 and "NEXUM_EVENT_STREAMS_MAX=3" in error["message"]
    close(held.pop())

    settings.NEXUM_EVENT_STREAMS_PER_PROCESS, settings.NEXUM_WEB_THREADS = 2, 3  # this process: 2 are open
    error = assert_refused(other_api.get(STREAM, {"timeout": 20}), 503, "streams_at_capacity")
    assert error["details"] == {"open": 2, "limit": 2, "retry_after_s": stream_slots.PROCESS_RETRY_AFTER_S}
    assert "all of its 3 request threads but one" in error["message"]
    close(held.pop())
    admitted = other_api.get(STREAM, {"timeout": 0})
    assert admitted.status_code == 200
    read(admitted)
    for response in held:
        close(response)


HOLD_STREAMS = """
import pathlib, time
from nexum_web.api.stream_slots import stream_slot_take
slots = [stream_slot_take(token_id=%r, project_id=%r, lasts_s=1) for _ in range(2)]
pathlib.Path(%r).touch()
time.sleep(600)
"""


@pytest.mark.django_db(transaction=True)
def test_streams_are_counted_across_processes_and_a_dead_processs_expire(api, project, settings, tmp_path):
    """Another process (a gunicorn worker, here a management shell) holds two of the token's two places: this
    process refuses a third; killed without closing them, its places stop counting after their deadline."""
    settings.NEXUM_EVENT_STREAMS_PER_TOKEN = 2
    token_id = str(AgentToken.objects.get(project=project, name="agent-1").id)
    held = tmp_path / "held"
    env = {**os.environ, "DATABASE_URL": database_url_for_worker(), "PYTHONPATH": str(ROOT)}
    hold = HOLD_STREAMS % (token_id, str(project.id), str(held))
    holder = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", hold],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        assert wait_for(lambda: held.exists() or holder.poll() is not None, timeout=60)
        assert held.exists(), holder.stderr.read().decode()[-2000:]
        assert_refused(api.get(STREAM, {"timeout": 0}), 429, "too_many_streams")
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # its leases are never released
        holder.wait(timeout=30)
    assert wait_for(
        lambda: api.get(STREAM, {"timeout": 0}).status_code == 200,
        timeout=stream_slots.LEASE_GRACE_S + 30,
    )
