"""The gate on a real Celery worker (SPEC V7): a worker killed mid-check, a restart, exactly one decision.

Runs only when CELERY_BROKER_URL is set. Late acknowledgement leaves the message of a killed worker unacked;
the restarted worker (visibility timeout 1 s) restores it at start-up and runs the request again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from django.conf import settings as django_settings

from nexum.eventstore.models import Event as EventRow
from tasks_app import services as task_services
from tasks_app.models import Task
from tests.integration.test_worker import ROOT, database_url_for_worker, wait_for
from verification_app import services
from verification_app.models import CheckRun, CompletionRequest

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(not django_settings.CELERY_BROKER_URL, reason="CELERY_BROKER_URL is not set"),
]


def start_worker(queue: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "nexum", "worker", "--pool=solo", "-Q", queue,
         "--loglevel=WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_check_reruns_it_after_restart_and_decides_once(
    project, tmp_path, settings, monkeypatch
):
    from verification_app.tasks import run_completion

    workspace, artifacts = tmp_path / "workspace", tmp_path / "artifacts"
    workspace.mkdir()
    settings.NEXUM_WORKSPACE_ROOT, settings.NEXUM_ARTIFACT_ROOT = workspace, artifacts
    settings.NEXUM_CHECK_EXECUTABLES = ["sh"]
    queue = f"test-gate-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_worker(),
        "PYTHONPATH": str(ROOT),
        "NEXUM_WORKSPACE_ROOT": str(workspace),
        "NEXUM_ARTIFACT_ROOT": str(artifacts),
        "NEXUM_CHECK_EXECUTABLES": "sh",
    }
    monkeypatch.setattr(
        run_completion, "delay", lambda request_id: run_completion.apply_async(args=[request_id], queue=queue)
    )
    script = 'echo run >> runs.log; sleep 5; echo "5 passed"'
    goal = task_services.goal_create(
        project_id=str(project.id),
        objective="Ship",
        tasks=[{"key": "s1", "objective": "Build"}],
        contracts={"s1": {"checks": [{"kind": "command", "name": "slow", "argv": ["sh", "-c", script]}]}},
        actor="planner",
    )
    task = Task.objects.get(goal=goal, key="s1")
    task = task_services.task_start(project_id=str(project.id), task_id=str(task.id), actor="agent")

    first = start_worker(queue, env)
    second = None
    try:
        pending = services.completion_request(
            project_id=str(project.id), task_id=str(task.id), answer="done", actor="agent"
        )
        assert pending.outcome == "pending"
        request_id = pending.request.id
        runs_log = workspace / project.slug / "runs.log"  # the project's own folder
        assert wait_for(runs_log.exists, timeout=30), "the first worker never started the check"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        time.sleep(1.5)  # older than the restarted worker's visibility timeout
        assert not CompletionRequest.objects.get(id=request_id).decided

        second = start_worker(queue, {**env, "NEXUM_CELERY_VISIBILITY_TIMEOUT": "1"})
        assert wait_for(lambda: CompletionRequest.objects.get(id=request_id).decided, timeout=40)
        time.sleep(1.0)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()

    request = CompletionRequest.objects.get(id=request_id)
    assert request.outcome == "completed"
    assert runs_log.read_text() == "run\nrun\n"  # killed once, run again after the restart
    assert CheckRun.objects.filter(request_id=request_id).count() == 1
    assert EventRow.objects.filter(event_type="GateDecided", data__request_id=str(request_id)).count() == 1
    assert EventRow.objects.filter(event_type="TaskCompleted", data__task_id=str(task.id)).count() == 1
    assert Task.objects.get(id=task.id).state == "completed"
