"""``GET /metrics`` (issue 28 item 2): Prometheus' text, parsed by Prometheus' own parser, counts a compile
and a completion, the gauges of state come from the database at scrape time, and only an operator token or
the scrape token may read it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.parser import text_string_to_metric_families

from nexum.eventstore import reading
from nexum.eventstore.models import Event
from nexum.work import leases
from nexum.work.models import Work
from nexum.work.selectors import stuck_requests
from nexum_web.webhooks.services import deliveries_record, webhook_register
from tests.api.test_foundation_api import assert_error
from tests.integration.compile_world import build_auth_world
from tests.integration.test_work import broker, pending_completion
from tests.integration.test_worker import ROOT
from verification_app.tasks import COMPLETION

__all__ = ["broker"]  # the fixture, used here by name

pytestmark = pytest.mark.django_db

SCRAPE_TOKEN = "scrape-" + "s" * 32
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client, **headers: str) -> Samples:
    """The scrape's samples by name and labels, as Prometheus' parser reads them."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == CONTENT_TYPE_PLAIN_0_0_4
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def grew(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_a_scrape_parses_and_counts_a_compile_and_a_completion(api, operator_api, project, workspace):
    world = build_auth_world(project, filler=5)
    before = scrape(operator_api)

    compiled = api.post(f"/api/v1/tasks/{world.task.id}/compile", {"model": "quick"}, format="json")
    assert compiled.status_code == 200, compiled.content
    tokens = compiled.json()["context"]["total_tokens"]
    contract = {"checks": [{"kind": "file_exists", "name": "built", "path": "dist/app.js"}]}
    goal = operator_api.post(
        "/api/v1/goals",
        {"objective": "Ship", "tasks": [{"key": "s1", "objective": "Build"}], "contracts": {"s1": contract}},
        format="json",
    ).json()
    task_id = goal["tasks"][0]["id"]
    assert api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").status_code == 200
    completed = api.post(f"/api/v1/tasks/{task_id}/complete", {"answer": "built"}, format="json")
    assert completed.json()["outcome"] == "failed", completed.content

    after = scrape(operator_api)
    assert grew(before, after, "nexum_compile_duration_seconds_count", model="quick") == 1
    assert grew(before, after, "nexum_compile_duration_seconds_sum", model="quick") > 0
    assert grew(before, after, "nexum_compile_tokens_count", model="quick") == 1
    assert grew(before, after, "nexum_compile_tokens_sum", model="quick") == tokens
    assert grew(before, after, "nexum_completions_total", outcome="failed") == 1
    assert grew(before, after, "nexum_check_failures_total", kind="file_exists", reason="missing_file") == 1
    compile_route = {"route": "/api/v1/tasks/<str:task_id>/compile", "method": "POST", "status": "200"}
    assert grew(before, after, "nexum_http_request_duration_seconds_count", **compile_route) == 1
    scrapes = {"route": "/metrics", "method": "GET", "status": "200"}
    assert grew(before, after, "nexum_http_request_duration_seconds_count", **scrapes) == 1  # the first
    assert value(after, "nexum_event_log_head", project="acme") == reading.project_head(str(project.id))[1]
    assert value(after, "nexum_metrics_state_seconds") > 0


def test_a_compile_answered_again_is_not_counted_twice(api, operator_api, project):
    world = build_auth_world(project, filler=5)
    url = f"/api/v1/tasks/{world.task.id}/compile"
    key = {"HTTP_IDEMPOTENCY_KEY": str(uuid.uuid4())}
    assert api.post(url, {"model": "quick"}, format="json", **key).status_code == 200
    before = scrape(operator_api)
    again = api.post(url, {"model": "quick"}, format="json", **key)  # the same request: its first answer
    assert again.status_code == 200
    assert grew(before, scrape(operator_api), "nexum_compile_duration_seconds_count", model="quick") == 0


def test_requests_are_timed_by_their_route_never_their_path(api, operator_api):
    before = scrape(operator_api)
    unknown = str(uuid.uuid4())
    assert api.get(f"/api/v1/tasks/{unknown}").status_code == 404
    assert api.get("/no/such/page").status_code == 404
    assert api.generic("BREW", "/api/v1/tasks").status_code == 405
    assert api.get("/").status_code == 302  # the root's pattern is the empty one
    after = scrape(operator_api)
    task = {"route": "/api/v1/tasks/<str:task_id>", "method": "GET", "status": "404"}
    assert grew(before, after, "nexum_http_request_duration_seconds_count", **task) == 1
    unmatched = {"route": "(unmatched)", "method": "GET", "status": "404"}
    assert grew(before, after, "nexum_http_request_duration_seconds_count", **unmatched) == 1
    other = {"route": "/api/v1/tasks", "method": "other", "status": "405"}
    assert grew(before, after, "nexum_http_request_duration_seconds_count", **other) == 1
    root = {"route": "/", "method": "GET", "status": "302"}
    assert grew(before, after, "nexum_http_request_duration_seconds_count", **root) == 1
    assert not any(unknown in str(labels) for _, labels in after)


def test_pending_and_stuck_requests_and_a_lease_taken_over(
    operator_api, project, workspace, broker, settings
):
    request = pending_completion(project)
    first = scrape(operator_api)
    assert value(first, "nexum_requests_pending", kind="completion") == 1
    assert value(first, "nexum_requests_stuck", kind="completion") == 0  # younger than a lease
    settings.NEXUM_LEASE_TTL_S = 0.001
    stuck = scrape(operator_api)
    assert value(stuck, "nexum_requests_stuck", kind="completion") == len(stuck_requests()) == 1
    assert value(stuck, "nexum_requests_pending", kind="compile") == 0

    Work.objects.create(
        key=COMPLETION.key(request.id), kind="completion", request_id=request.id, owner="gone:1:a",
        expires_at=timezone.now() - timedelta(seconds=1),
    )  # fmt: skip  # an expired lease: still stuck, and the next delivery takes it over
    assert value(scrape(operator_api), "nexum_requests_stuck", kind="completion") == 1
    settings.NEXUM_LEASE_TTL_S = 600
    leases.acquire(COMPLETION, str(request.id)).close(answered=False)
    after = scrape(operator_api)
    assert grew(stuck, after, "nexum_lease_takeovers_total", kind="completion") == 1
    assert value(after, "nexum_requests_stuck", kind="completion") == 0


def test_the_webhook_backlog_counts_events_not_yet_recorded_then_deliveries_pending(
    operator_api, project, settings
):
    settings.NEXUM_SOURCE_HTTP_ALLOW = ["127.0.0.1:9"]
    webhook_register(project_id=str(project.id), url="http://127.0.0.1:9/hook", actor="test")
    registered_at = reading.project_head(str(project.id))[1]
    assert value(scrape(operator_api), "nexum_webhook_backlog", project="acme", stage="unrecorded") == 0
    goal = {"objective": "Ship", "tasks": [{"key": "s1", "objective": "Build"}]}
    assert operator_api.post("/api/v1/goals", goal, format="json").status_code == 201
    since = reading.project_head(str(project.id))[1] - registered_at
    recorded = scrape(operator_api)
    assert since > 0
    assert value(recorded, "nexum_webhook_backlog", project="acme", stage="unrecorded") == since
    assert value(recorded, "nexum_webhook_backlog", project="acme", stage="pending") == 0
    assert deliveries_record() == since
    delivering = scrape(operator_api)
    assert value(delivering, "nexum_webhook_backlog", project="acme", stage="unrecorded") == 0
    assert value(delivering, "nexum_webhook_backlog", project="acme", stage="pending") == since


# --- who may scrape -----------------------------------------------------------------------------------------


def test_no_token_an_unknown_one_and_an_agents_are_refused_in_the_error_shape(client, api, settings):
    settings.NEXUM_METRICS_TOKEN = SCRAPE_TOKEN
    events = Event.objects.count()
    assert_error(client.get("/metrics"), 401, "not_authenticated")
    assert_error(client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope"), 401, "authentication_failed")
    wrong = SCRAPE_TOKEN[:-1] + "x"
    assert_error(client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {wrong}"), 401, "authentication_failed")
    refused = assert_error(api.get("/metrics"), 403, "forbidden")
    assert "operator token or the scrape token" in refused["message"]
    # Prometheus asks for its text formats: a refusal is JSON all the same.
    accepts = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    assert_error(client.get("/metrics", HTTP_ACCEPT=accepts), 401, "not_authenticated")
    assert_error(api.get("/metrics?project=acme"), 403, "forbidden")
    assert Event.objects.count() == events


def test_the_scrape_token_sees_every_project_an_operator_its_own(
    client, operator_api, project, other_project, settings
):
    settings.NEXUM_METRICS_TOKEN = SCRAPE_TOKEN
    scraper_sees = scrape(client, HTTP_AUTHORIZATION=f"Bearer {SCRAPE_TOKEN}")
    assert {"acme", "globex"} <= projects_in(scraper_sees)
    assert projects_in(scrape(operator_api)) == {"acme"}
    # the scrape token reads the metrics and nothing else
    refused = client.get("/api/v1/tasks", HTTP_AUTHORIZATION=f"Bearer {SCRAPE_TOKEN}")
    assert_error(refused, 401, "authentication_failed")
    assert_error(operator_api.get("/metrics?project=globex"), 400, "unknown_parameter")
    assert_error(operator_api.post("/metrics", {}, format="json"), 405, "method_not_allowed")
    settings.NEXUM_METRICS_TOKEN = ""  # not configured: no token is the scrape token
    assert_error(client.get("/metrics", HTTP_AUTHORIZATION="Bearer "), 401, "authentication_failed")


def projects_in(samples: Samples) -> set[str]:
    return {dict(labels)["project"] for name, labels in samples if name == "nexum_event_log_head"}


# --- configuration ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "given", "message"),
    [
        (
            "NEXUM_METRICS_TOKEN",
            "short",
            "NEXUM_METRICS_TOKEN must be at least 24 printable ASCII characters",
        ),
        ("NEXUM_METRICS_TOKEN", "a" * 30 + " b", "without spaces"),
        ("PROMETHEUS_MULTIPROC_DIR", "/no/such/folder", "which is not a folder"),
    ],
)
def test_a_bad_metrics_setting_stops_the_start_naming_it(variable, given, message):
    env = {**os.environ, variable: given}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and message in result.stderr, result.stderr[-2000:]
