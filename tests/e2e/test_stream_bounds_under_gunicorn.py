"""Open event streams are bounded under a real gunicorn (issue 23, item 7), as in production: two worker
processes of six threads, debug off. Thirty streams opened with one token: four are served (the token's
share), the rest are 429; more tokens fill the server's share (workers × (threads − 1) = 10), past which
streams are 503; meanwhile another project's request answers within a second, every time; and a stream whose
client goes away frees its place. The per-process bound follows the thread count gunicorn really runs with,
given on its command line too."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.e2e.test_production import manage, production_env, running_gunicorn
from tests.integration.test_worker import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS, THREADS, PER_TOKEN = 2, 6, 4
SERVER_SHARE = WORKERS * (THREADS - 1)


@contextlib.contextmanager
def gunicorn(tmp_path, **settings: str) -> Iterator[str]:
    """The production server, its streams long and their keep-alives frequent."""
    with running_gunicorn(
        tmp_path,
        NEXUM_STATIC_ROOT=str(tmp_path / "static"),
        NEXUM_EVENT_STREAM_MAX_S="120",
        NEXUM_EVENT_STREAM_HEARTBEAT_S="1",  # a client gone is noticed at the next keep-alive
        **settings,
    ) as base_url:
        yield base_url


@pytest.fixture
def server(tmp_path) -> Iterator[str]:
    with gunicorn(
        tmp_path,
        NEXUM_WEB_WORKERS=str(WORKERS),
        NEXUM_WEB_THREADS=str(THREADS),
        NEXUM_EVENT_STREAMS_PER_TOKEN=str(PER_TOKEN),
    ) as base_url:
        yield base_url


class Stream:
    """One ``GET /events/stream`` on a connection of its own, left open while it is served."""

    def __init__(self, base_url: str, key: str) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=30)
        self.connection.request(
            "GET",
            "/api/v1/events/stream?timeout=120",
            headers={
                "Authorization": f"Bearer {key}",
                "X-Forwarded-Proto": "https",
                "Accept": "text/event-stream",
            },
        )
        self.response = self.connection.getresponse()
        self.status = self.response.status
        self.error: dict = {}
        if self.status != 200:
            self.error = json.loads(self.response.read())["error"]
            self.retry_after = self.response.headers["Retry-After"]
            self.close()

    def close(self) -> None:
        """The client goes away: the server learns it at its next write to the connection."""
        if self.connection.sock is not None:
            with contextlib.suppress(OSError):
                self.connection.sock.shutdown(socket.SHUT_RDWR)
        self.connection.close()


def timed_get(base_url: str, path: str, key: str) -> tuple[int, float]:
    host, port = base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    started = time.monotonic()
    try:
        connection.request(
            "GET", path, headers={"Authorization": f"Bearer {key}", "X-Forwarded-Proto": "https"}
        )
        response = connection.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    finally:
        connection.close()


def test_streams_past_the_shares_are_refused_and_other_projects_are_served_meanwhile(
    server, project, other_project
):
    from tasks_app.services.tokens import agent_token_issue

    def key(project, name: str) -> str:
        return agent_token_issue(project_id=str(project.id), name=name, actor="test").key

    streamer, colleagues = key(project, "streamer"), [key(project, "second"), key(project, "third")]
    elsewhere = key(other_project, "elsewhere")
    streams: list[Stream] = []
    try:
        streams += [Stream(server, streamer) for _ in range(30)]
        statuses = [stream.status for stream in streams]
        assert statuses[:PER_TOKEN] == [200] * PER_TOKEN and set(statuses[PER_TOKEN:]) == {429}, statuses
        refused = streams[PER_TOKEN]
        assert refused.error["code"] == "too_many_streams" and 60 <= int(refused.retry_after) <= 120

        streams += [Stream(server, colleague) for colleague in colleagues for _ in range(PER_TOKEN)]
        served = [stream for stream in streams if stream.status == 200]
        assert PER_TOKEN < len(served) <= SERVER_SHARE
        beyond = [stream for stream in streams[30:] if stream.status != 200]
        assert beyond and {(s.status, s.error["code"]) for s in beyond} == {(503, "streams_at_capacity")}

        for _ in range(10):  # new connections: each may reach either worker
            status, took = timed_get(server, "/api/v1/tasks", elsewhere)
            assert status == 200 and took <= 1.0, took

        for stream in served[:PER_TOKEN]:  # the streamer's clients go away
            stream.close()

        def reopened() -> bool:
            streams.append(Stream(server, streamer))
            return streams[-1].status == 200

        assert wait_for(reopened, timeout=20)
    finally:
        for stream in streams:
            stream.close()


def test_the_bounds_follow_the_thread_count_gunicorn_really_runs_with(tmp_path, project):
    """Threads given on gunicorn's command line (GUNICORN_CMD_ARGS), not in NEXUM_WEB_THREADS: each worker
    still knows them (deploy/gunicorn.conf.py's post_fork), so a worker of 3 threads serves 2 streams."""
    from tasks_app.services.tokens import agent_token_issue

    keys = [agent_token_issue(project_id=str(project.id), name=f"t{n}", actor="test").key for n in range(3)]
    streams: list[Stream] = []
    with gunicorn(tmp_path, GUNICORN_CMD_ARGS="--workers 1 --threads 3") as base_url:
        try:
            streams += [Stream(base_url, key) for key in keys]
            assert [stream.status for stream in streams] == [200, 200, 503]
            assert "all of its 3 request threads but one" in streams[2].error["message"]
            status, took = timed_get(base_url, "/api/v1/tasks", keys[0])
            assert status == 200 and took <= 1.0, took
        finally:
            for stream in streams:
                stream.close()


@pytest.mark.parametrize("name", ["NEXUM_EVENT_STREAMS_PER_TOKEN", "NEXUM_EVENT_STREAMS_MAX"])
def test_a_bound_below_one_stream_refuses_to_start_naming_it(tmp_path, name):
    result = manage(production_env(tmp_path, **{name: "0"}), "check")
    assert result.returncode != 0
    assert "NEXUM_EVENT_STREAMS_PER_TOKEN and NEXUM_EVENT_STREAMS_MAX must be at least 1" in result.stderr
