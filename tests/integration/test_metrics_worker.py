"""A real Celery worker (a prefork pool, as ``make serve`` runs it) records the gate's counts in
``PROMETHEUS_MULTIPROC_DIR``, where a scrape by the web processes sums them (only when CELERY_BROKER_URL is
set)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_work import started_task
from tests.integration.test_worker import ROOT, database_url_for_worker, wait_for
from verification_app.models import CompletionRequest
from verification_app.services.completions import completion_request

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(not settings.CELERY_BROKER_URL, reason="CELERY_BROKER_URL is not set"),
]


@pytest.fixture
def metrics_dir(tmp_path) -> Path:
    folder = tmp_path / "prometheus"
    folder.mkdir()
    return folder


@pytest.fixture
def completions_worker(workspace, metrics_dir) -> Iterator[subprocess.Popen]:
    """A worker of the completions queue, one pool process, sharing the test's database, artifact store,
    workspace and metrics folder."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_worker(),
        "PYTHONPATH": str(ROOT),
        "NEXUM_WORKSPACE_ROOT": str(workspace),
        "NEXUM_ARTIFACT_ROOT": str(settings.NEXUM_ARTIFACT_ROOT),
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=prefork", "--concurrency=1",
         "-Q", "completions", "--loglevel=WARNING", "--without-gossip", "--without-mingle",
         "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    yield process
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def folder_samples(folder: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What a scrape of the processes' metrics in ``folder`` reports."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(folder))
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }


@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_counts_its_decisions_and_failed_checks_in_the_shared_folder(
    project, completions_worker, metrics_dir
):
    built = {"kind": "file_exists", "name": "built", "path": "dist/app.js"}
    task = started_task(project, {"checks": [built]})
    result = completion_request(
        project_id=str(project.id), task_id=str(task.id), answer="built", actor="agent"
    )
    assert result.outcome == "pending" and result.request is not None

    def decided() -> bool:
        return CompletionRequest.objects.filter(id=result.request.id, decided=True).exists()

    assert wait_for(decided), "the worker did not decide the request within 60 s"
    samples = folder_samples(metrics_dir)
    assert samples[("nexum_completions_total", (("outcome", "failed"),))] == 1
    assert samples[("nexum_check_failures_total", (("kind", "file_exists"), ("reason", "missing_file")))] == 1
    # written by the pool's process, not by the worker's main process
    writers = {path.stem.rsplit("_", 1)[1] for path in metrics_dir.glob("*.db")}
    assert writers and str(completions_worker.pid) not in writers
