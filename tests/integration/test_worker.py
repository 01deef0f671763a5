"""A real Celery worker on the real broker runs a task end to end (only when CELERY_BROKER_URL is set)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from nexum.eventstore.models import Event

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(not settings.CELERY_BROKER_URL, reason="CELERY_BROKER_URL is not set"),
]


def database_url_for_worker() -> str:
    """The URL of the database this test runs against, for the worker process."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def worker():
    """A worker process consuming a queue of its own, against the test database."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DATABASE_URL": database_url_for_worker(), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool=solo",
            "-Q",
            queue,
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    yield queue
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def wait_for(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.django_db(transaction=True)
def test_health_ping_runs_on_a_real_worker_once_even_if_sent_twice(worker):
    from nexum.eventstore.tasks import record_health_ping

    ping_id = str(uuid.uuid4())
    record_health_ping.apply_async(args=[ping_id], queue=worker)
    record_health_ping.apply_async(args=[ping_id], queue=worker)  # a redelivery

    def pinged() -> bool:
        return Event.objects.filter(event_type="HealthPinged", data__ping_id=ping_id).exists()

    assert wait_for(pinged), "the worker did not record the ping within 60 s"
    time.sleep(1.0)
    assert Event.objects.filter(event_type="HealthPinged", data__ping_id=ping_id).count() == 1
