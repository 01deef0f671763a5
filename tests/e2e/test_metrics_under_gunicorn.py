"""``/metrics`` served by a real gunicorn with two worker processes, as ``make serve`` runs it: each process
keeps its counts in ``PROMETHEUS_MULTIPROC_DIR`` and a scrape, whichever worker answers it, sums them."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.test_production import assert_error, fetch, running_gunicorn

pytestmark = pytest.mark.django_db  # the server's database: the test database, migrated

HEALTH = {"route": "/api/v1/health", "method": "GET", "status": "200"}
HEALTH_COUNT = "nexum_http_request_duration_seconds_count"
MOST_REQUESTS = 400  # far more than two workers taking turns need; a bound, not a wait


def health_count(text: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == HEALTH_COUNT and sample.labels == HEALTH:
                return sample.value
    return 0.0


def scraped_health_count(base_url: str, token: str) -> float:
    """How many health checks the deployment has answered, as its scrape says."""
    status, headers, body = fetch(base_url, "/metrics", Authorization=f"Bearer {token}")
    assert status == 200, body[:500]
    assert headers["Content-Type"] == CONTENT_TYPE_PLAIN_0_0_4
    return health_count(body.decode())


def health_count_by_process(metrics_dir: Path, copies: Path) -> dict[str, float]:
    """Each process's own count of health checks: its histogram file (prometheus_client names it by the
    process's pid) read alone."""
    counts = {}
    for path in metrics_dir.glob("histogram_*.db"):
        alone = copies / path.stem
        alone.mkdir(parents=True)
        shutil.copyfile(path, alone / path.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))
        counts[path.stem.removeprefix("histogram_")] = health_count(generate_latest(registry).decode())
    return counts


def test_a_scrape_sums_the_counts_of_both_gunicorn_workers(tmp_path):
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    token = secrets.token_urlsafe(32)
    with running_gunicorn(
        tmp_path,
        NEXUM_WEB_WORKERS="2",
        NEXUM_WEB_THREADS="2",
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
        NEXUM_METRICS_TOKEN=token,
    ) as base_url:
        assert_error(*fetch(base_url, "/metrics"), 401, "not_authenticated")
        before = scraped_health_count(base_url, token)
        sent = 0
        while sent < MOST_REQUESTS:
            assert fetch(base_url, "/api/v1/health")[0] == 200
            sent += 1
            counts = health_count_by_process(metrics_dir, tmp_path / f"copies-{sent}")
            if len(counts) == 2 and all(counts.values()):
                break
        assert len(counts) == 2 and all(counts.values()), f"one worker answered all {sent}: {counts}"
        total = scraped_health_count(base_url, token)
        assert total == sum(counts.values()) and total - before == sent
