"""How long a Prometheus scrape of ``/metrics`` takes at 10k tasks (run by hand; not a test).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nexum_bench .venv/bin/python bench/metrics_scrape.py

Builds ``BENCH_TASKS`` tasks (10,000) in goals of 100 across ``BENCH_PROJECTS`` projects (10), starts
``BENCH_PENDING_SHARE`` of them (a tenth) and asks for their completion with no worker to run them, so they
stay pending, all older than a lease and unleased (the stuck count's worst case: every one is a candidate),
and gives each project a webhook whose deliveries are half recorded. Then scrapes ``BENCH_SCRAPES`` times
(20) through the view with the scrape token and prints the scrape's time (p50, p95, max), the state gauges'
share (``nexum_metrics_state_seconds``), each gauge function's own time, the queries of one scrape, the time
of a ``SELECT 1`` and the load averages. Without DATABASE_URL it runs on the SQLite file of NEXUM_DATA_DIR.
Uses (and resets) the database.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ["NEXUM_METRICS_TOKEN"] = SCRAPE_TOKEN = "bench-scrape-token-" + "x" * 24
os.environ["NEXUM_SOURCE_HTTP_ALLOW"] = "127.0.0.1:9"  # the webhooks' host (never reached)
os.environ.setdefault("NEXUM_DATA_DIR", str(Path(__file__).resolve().parents[1] / "data" / "bench"))

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, override_settings  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from nexum.eventstore.models import Event  # noqa: E402
from nexum_web.api import metrics as metrics_view  # noqa: E402
from nexum_web.webhooks.models import WebhookDelivery  # noqa: E402
from nexum_web.webhooks.services import deliveries_record, webhook_register  # noqa: E402
from tasks_app.models import Task  # noqa: E402
from tasks_app.services.goals import goal_create  # noqa: E402
from tasks_app.services.lifecycle import task_start  # noqa: E402
from tasks_app.services.projects import project_create  # noqa: E402
from verification_app.models import CompletionRequest  # noqa: E402
from verification_app.services.completions import completion_request  # noqa: E402
from verification_app.tasks import run_completion  # noqa: E402

TASKS = int(os.environ.get("BENCH_TASKS", 10_000))
PROJECTS = int(os.environ.get("BENCH_PROJECTS", 10))
PENDING_SHARE = float(os.environ.get("BENCH_PENDING_SHARE", 0.1))
SCRAPES = int(os.environ.get("BENCH_SCRAPES", 20))
GOAL_SIZE = 100
HOOK_URL = "http://127.0.0.1:9/hook"


def build() -> None:
    """The world: projects, goals of ``GOAL_SIZE`` tasks, every task started, a share asked to complete."""
    started = time.perf_counter()
    run_completion.apply_async = lambda *args, **kwargs: None  # sent to a broker that no worker reads
    per_project = TASKS // PROJECTS
    for index in range(PROJECTS):
        project = project_create(slug=f"bench-{index}", name=f"Bench {index}", actor="bench")
        project_id = str(project.id)
        webhook_register(project_id=project_id, url=HOOK_URL, actor="bench")
        for first in range(0, per_project, GOAL_SIZE):
            keys = [f"t{n}" for n in range(first, min(first + GOAL_SIZE, per_project))]
            goal_create(
                project_id=project_id,
                objective=f"Goal {first}",
                tasks=[{"key": key, "objective": f"Step {key}"} for key in keys],
                actor="bench",
            )
        tasks = list(Task.objects.filter(project_id=project_id, is_goal=False).values_list("id", flat=True))
        asked = int(len(tasks) * PENDING_SHARE)
        for task_id in tasks[:asked]:
            task_start(project_id=project_id, task_id=str(task_id), actor="agent")
            completion_request(project_id=project_id, task_id=str(task_id), answer="done", actor="agent")
        elapsed = time.perf_counter() - started
        print(f"  project {index + 1}/{PROJECTS}: {len(tasks)} tasks, {asked} pending ({elapsed:.0f} s)")
    deliveries_record(batch=Event.objects.count() // (2 * PROJECTS))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def timed(function, *args) -> float:
    started = time.perf_counter()
    for _ in function(*args):
        pass
    return time.perf_counter() - started


def main() -> None:
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    print(f"Building {TASKS} tasks in {PROJECTS} projects on {connection.vendor} …")
    build()
    tasks = Task.objects.filter(is_goal=False).count()
    pending = CompletionRequest.objects.filter(decided=False).count()
    deliveries = WebhookDelivery.objects.filter(state="pending").count()
    print(f"World: {tasks} tasks, {pending} completion requests pending, {Event.objects.count()} events,")
    print(f"       {deliveries} webhook deliveries pending")

    client = Client(HTTP_AUTHORIZATION=f"Bearer {SCRAPE_TOKEN}")
    totals, states, by_gauge = [], [], {gauge.__name__: [] for gauge in metrics_view.STATE_GAUGES}
    with override_settings(NEXUM_LEASE_TTL_S=0.001):  # every pending request is past its lease
        client.get("/metrics")  # the first scrape warms the connection and the caches
        for _ in range(SCRAPES):
            started = time.perf_counter()
            response = client.get("/metrics")
            totals.append(time.perf_counter() - started)
            assert response.status_code == 200, response.content[:300]
            families = {
                family.name: family for family in text_string_to_metric_families(response.content.decode())
            }
            states.append(families["nexum_metrics_state_seconds"].samples[0].value)
            for gauge in metrics_view.STATE_GAUGES:
                by_gauge[gauge.__name__].append(timed(gauge, None))
        stuck = sum(sample.value for sample in families["nexum_requests_stuck"].samples)
    with CaptureQueriesContext(connection) as queries:
        client.get("/metrics")
    with connection.cursor() as cursor:
        started = time.perf_counter()
        cursor.execute("SELECT 1")
        round_trip = time.perf_counter() - started
    print(f"Stuck requests reported: {stuck:.0f}; scrape size {len(response.content)} bytes")
    print(f"Queries per scrape (the scrape token needs none): {len(queries)}")
    print(f"A SELECT 1 took {round_trip * 1000:.1f} ms")
    print(f"Load averages: {' '.join(f'{load:.1f}' for load in os.getloadavg())}")
    print(f"{'':28}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
    for name, values in [("scrape (GET /metrics)", totals), ("state gauges", states), *by_gauge.items()]:
        ms = [value * 1000 for value in values]
        print(f"{name:28}{statistics.median(ms):10.1f}{percentile(ms, 0.95):10.1f}{max(ms):10.1f}")
    print(f"(lease TTL {settings.NEXUM_LEASE_TTL_S} s outside the scrapes; {SCRAPES} scrapes)")


if __name__ == "__main__":
    main()
