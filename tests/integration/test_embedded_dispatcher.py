"""The embedded default never leaves a request pending for good (issue 29): a completion whose `make run`
process died mid-check is decided once the server is started again, by the embedded dispatcher
(``nexum.work.embedded``), with no broker and no ``nexum_requeue``.

The servers are ``manage.py runserver`` processes on the test database, as ``make run`` starts it (Celery
eager: no ``CELERY_BROKER_URL``), on ``NEXUM_TEST_SERVER_PORTS`` when set (a range ``first-last``), else on
a free port. Every wait is bounded."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from django.utils import timezone

from config.celery import app
from nexum.work import embedded
from nexum.work.models import Work
from tasks_app.services.tokens import agent_token_issue
from tests.integration.test_faults import (
    FAST,
    Processes,
    api_call,
    decisions,
    free_port,
    manage,
    started_tasks,
)
from tests.integration.test_worker import ROOT, database_url_for_worker, wait_for
from verification_app.models import CompletionRequest
from verification_app.services.completions import completion_request
from verification_app.tasks import COMPLETION

# Runs 60 s the first time (the process running it is killed meanwhile), at once every later time.
SLOW_THEN_QUICK = (
    "if [ -e runs.log ]; then s=0; else s=60; fi; "
    'echo "start $$" >> runs.log; sleep $s; echo "end $$" >> runs.log'
)


def server_port() -> int:
    ports = os.environ.get("NEXUM_TEST_SERVER_PORTS")
    if not ports:
        return free_port()
    first, last = (int(end) for end in ports.split("-"))
    for port in range(first, last + 1):
        with contextlib.suppress(OSError), socket.socket() as probe:
            probe.bind(("127.0.0.1", port))
            return port
    raise RuntimeError(f"no free port in NEXUM_TEST_SERVER_PORTS={ports}")


@pytest.fixture
def servers(tmp_path) -> Iterator[Processes]:
    logs = tmp_path / "logs"
    logs.mkdir()
    started = Processes(logs)
    try:
        yield started
    finally:
        started.stop_all()


def embedded_environment(workspace: Path, artifacts: Path) -> dict[str, str]:
    environment = {
        **os.environ,
        **FAST,
        "DATABASE_URL": database_url_for_worker(),
        "NEXUM_WORKSPACE_ROOT": str(workspace),
        "NEXUM_ARTIFACT_ROOT": str(artifacts),
        "NEXUM_CHECK_EXECUTABLES": "sh",
        "PYTHONPATH": str(ROOT),
    }
    environment.pop("CELERY_BROKER_URL", None)
    return environment


@pytest.mark.django_db(transaction=True)
def test_a_completion_left_pending_by_a_killed_server_is_decided_after_the_server_starts_again(
    project, workspace, settings, servers: Processes
):
    [task] = started_tasks(project, ["s1"], SLOW_THEN_QUICK)
    key = agent_token_issue(project_id=str(project.id), name="agent", role="agent", actor="test").key
    env = embedded_environment(workspace, settings.NEXUM_ARTIFACT_ROOT)
    port = server_port()
    base = f"http://127.0.0.1:{port}"
    serve = manage("runserver", "--noreload", "--skip-checks", f"127.0.0.1:{port}")
    servers.start("first", serve, env)
    assert wait_for(lambda: _answers(base), timeout=60), servers.log("first")

    # The completion is recorded, then its check runs inside the request; the server dies meanwhile.
    caller = threading.Thread(
        target=lambda: _suppressed(api_call, base, key, f"/api/v1/tasks/{task.id}/complete", {}), daemon=True
    )
    caller.start()
    runs = workspace / project.slug / "runs.log"
    assert wait_for(runs.exists, timeout=30), servers.log("first")
    [request] = CompletionRequest.objects.filter(task_id=task.id)
    leased = Work.objects.filter(key=COMPLETION.key(request.id), check_pid__isnull=False)
    assert wait_for(leased.exists, timeout=30), (
        "the in-process run holds the request's lease, naming its check"
    )
    servers.stop("first", signal.SIGKILL)
    caller.join(timeout=30)
    assert not CompletionRequest.objects.get(id=request.id).decided

    servers.start("second", serve, env)
    restarted = time.monotonic()
    assert wait_for(lambda: CompletionRequest.objects.get(id=request.id).decided, timeout=60), servers.log(
        "second"
    )
    print(f"decided {time.monotonic() - restarted:.1f} s after the server was started again")
    assert CompletionRequest.objects.get(id=request.id).outcome == "completed"
    assert decisions(request.id) == 1
    first, second, end = runs.read_text().splitlines()  # the first run's check was killed, never ended
    assert first.startswith("start") and second.startswith("start") and end == second.replace("start", "end")
    assert "left pending" in servers.log("second")
    assert not Work.objects.filter(key=COMPLETION.key(request.id)).exists()


@pytest.mark.django_db(transaction=True)
def test_the_embedded_dispatcher_takes_only_what_no_live_process_runs(project, workspace, settings):
    [task] = started_tasks(project, ["s1"], "true")
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False  # recorded and never run: as if its process died at once
    try:
        with mock.patch("nexum.work.dispatch.send", return_value=False):
            request = completion_request(
                project_id=str(project.id), task_id=str(task.id), answer="done", actor="agent"
            ).request
    finally:
        app.conf.task_always_eager = eager
    assert request is not None and not CompletionRequest.objects.get(id=request.id).decided
    now = timezone.now()
    assert embedded.left_pending(now=now) == [], "just recorded: its caller is about to run it"
    later = now + timedelta(seconds=settings.NEXUM_LEASE_TTL_S + 1)
    assert [pending.key for pending in embedded.left_pending(now=later)] == [COMPLETION.key(request.id)]

    Work.objects.create(
        key=COMPLETION.key(request.id),
        kind=COMPLETION.name,
        request_id=request.id,
        owner="elsewhere:1:live",
        expires_at=later + timedelta(seconds=60),
    )
    assert embedded.left_pending(now=later) == [], "leased by a live process (another host's)"
    Work.objects.filter(key=COMPLETION.key(request.id)).update(expires_at=now)
    assert [pending.key for pending in embedded.left_pending(now=later)] == [COMPLETION.key(request.id)]

    assert embedded.dispatch_left_pending(now=later) == [COMPLETION.key(request.id)]
    assert CompletionRequest.objects.get(id=request.id).outcome == "completed"
    assert embedded.left_pending(now=later) == []


def _answers(base: str) -> bool:
    with contextlib.suppress(OSError), urllib.request.urlopen(f"{base}/api/v1/health", timeout=2) as answer:
        return answer.status == 200
    return False


def _suppressed(call, *args) -> None:
    """The call's connection dies with the server: that is the point."""
    with contextlib.suppress(OSError):
        call(*args)
