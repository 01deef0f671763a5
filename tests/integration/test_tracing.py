"""Traces (issue 28, item 1): an OTLP/HTTP receiver on a free port gets a compile's trace (the request, the
compile and its phases) and, from a real Celery worker, a completion's and a queued compile's, the worker's
spans parented across the queue to the request that sent the work (with its SQL statements on PostgreSQL,
``NEXUM_TRACE_SQL``). Off, nothing of the SDK is loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from config.celery import app as celery_app
from nexum.adapters import telemetry
from tests.api.test_verification_api import echo_check, started_task
from tests.integration.compile_world import build_auth_world, load_catalog
from tests.integration.test_worker import ROOT, database_url_for_worker
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

PHASES = ["read", "rank", "pack", "render", "record"]


@pytest.fixture
def traced():
    """Tracing on in this process, exported at once (no batching) to a receiver of the test's own."""
    with OtlpReceiver() as receiver:
        provider = telemetry.new_provider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{receiver.endpoint}/v1/traces")))
        telemetry.start_tracing(provider)
        try:
            yield receiver
        finally:
            telemetry.stop_tracing()
            provider.shutdown()


def named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.name == name]


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    [span] = named(spans, name)
    return span


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[str]:
    """The names of Nexum's spans directly under ``parent`` (the database's statements left out)."""
    return [
        span.name for span in spans if span.parent_id == parent.span_id and span.name.startswith("nexum.")
    ]


@pytest.mark.django_db
def test_a_compile_is_one_trace_from_the_request_through_every_phase(traced, project, api):
    task_id = str(build_auth_world(project, filler=30).task.id)
    response = api.post(f"/api/v1/tasks/{task_id}/compile", {"model": "quick"}, format="json")
    assert response.status_code == 200, response.content
    context = response.json()["context"]

    assert traced.wait_for(lambda spans: named(spans, "nexum.compile"), timeout_s=10)
    spans = traced.spans()
    compiled = one(spans, "nexum.compile")
    trace = [span for span in spans if span.trace_id == compiled.trace_id]
    [request] = [span for span in trace if not span.parent_id]
    assert request.name.startswith("POST ") and "compile" in request.name
    assert request.attributes["nexum.request_id"] == response["X-Request-ID"]
    assert compiled.parent_id == request.span_id
    assert compiled.attributes == {
        "nexum.project_id": str(project.id),
        "nexum.task_id": task_id,
        "nexum.model_word": "quick",
        "nexum.compile_id": response.json()["request_id"],
        "nexum.outcome": "compiled",
        "nexum.budget_tokens": context["budget"]["context_tokens"],
        "nexum.tokens_used": context["prompt_tokens"] + context["tool_tokens"],
        "nexum.excluded_count": context["exclusions"]["count"],
        "nexum.digest": context["digest"],
    }
    assert children(trace, compiled) == [f"nexum.compile.{phase}" for phase in PHASES]
    assert context["exclusions"]["count"] > 0  # the quick card's budget leaves some of the world out
    for phase in PHASES:
        assert one(trace, f"nexum.compile.{phase}").attributes == {"nexum.phase": phase}


def test_off_no_sdk_is_loaded_and_a_span_is_one_shared_no_op():
    assert not telemetry.tracing_on()
    assert telemetry.span("nexum.compile", project_id="p") is telemetry.span("nexum.resolve")
    with telemetry.span("nexum.compile") as off:
        off.set(outcome="compiled")
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    probe = (
        "import django, sys; django.setup(); from nexum.adapters import telemetry;"
        " print(telemetry.tracing_on(), sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**environment, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert shown.stdout.split("\n")[-2] == "False []", shown.stdout + shown.stderr


# --- a real worker -----------------------------------------------------------------------------------------


@pytest.fixture
def traced_worker(traced, workspace, tmp_path, monkeypatch):
    """A worker exporting to the test's receiver, consuming a queue of its own where this process's
    completions and queued compiles are routed."""
    from celery.app import routes

    queue = f"test-otel-{os.getpid()}-{tmp_path.name[-12:]}"
    table = {
        name: {"queue": queue} for name in ("nexum.verification.run_completion", "nexum.compile_context")
    }
    monkeypatch.setattr(celery_app.amqp, "_rtable", routes.prepare(table))
    monkeypatch.delitem(celery_app.amqp.__dict__, "router", raising=False)
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_worker(),
        "PYTHONPATH": str(ROOT),
        "OTEL_EXPORTER_OTLP_ENDPOINT": traced.endpoint,
        "OTEL_SERVICE_NAME": "nexum-worker",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "NEXUM_TRACE_SQL": "1",
        "NEXUM_WORKSPACE_ROOT": str(settings.NEXUM_WORKSPACE_ROOT),
        "NEXUM_ARTIFACT_ROOT": str(settings.NEXUM_ARTIFACT_ROOT),
        "NEXUM_CHECK_EXECUTABLES": ",".join(settings.NEXUM_CHECK_EXECUTABLES),
    }
    command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo", "-Q", queue]
    quiet = ["--loglevel=WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    process = subprocess.Popen(
        [*command, *quiet], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    yield traced
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def worker_trace(spans: list[ReceivedSpan], task: str, span_name: str) -> list[ReceivedSpan]:
    """The spans of the trace in which the worker ran ``span_name``, checked parented across the queue:
    the request → the publish of ``task`` (this process) → its run (the worker) → ``span_name``."""
    done = [span for span in named(spans, span_name) if span.service == "nexum-worker"]
    assert len(done) == 1, [(span.name, span.service) for span in spans]
    trace = [span for span in spans if span.trace_id == done[0].trace_id]
    [request] = [span for span in trace if not span.parent_id]
    assert request.service == "nexum" and request.name.startswith("POST ")
    published = one(trace, f"apply_async/{task}")
    ran = one(trace, f"run/{task}")
    assert (published.service, ran.service) == ("nexum", "nexum-worker")
    assert ran.parent_id == published.span_id
    assert done[0].parent_id == ran.span_id
    ancestors = {span.span_id: span.parent_id for span in trace}
    hop = published.parent_id
    while hop != request.span_id:
        assert hop in ancestors, "the publish is not inside the request's span"
        hop = ancestors[hop]
    return trace


@pytest.mark.worker
@pytest.mark.skipif(not settings.CELERY_BROKER_URL, reason="CELERY_BROKER_URL is not set")
@pytest.mark.django_db(transaction=True)
def test_a_worker_continues_the_requests_trace_for_a_completion_and_a_queued_compile(
    traced_worker, project, api, operator_api
):
    load_catalog(str(project.id))
    task_id = started_task(operator_api, api, {"checks": [echo_check("unit", "echo 3 passed")]})
    queued = api.post(f"/api/v1/tasks/{task_id}/compile", {"model": "quick", "async": True}, format="json")
    assert queued.status_code == 202, queued.content
    completing = api.post(f"/api/v1/tasks/{task_id}/complete", {"answer": "done"}, format="json")
    assert completing.status_code == 202, completing.content

    def both_done(spans: list[ReceivedSpan]) -> bool:
        worker_names = {span.name for span in spans if span.service == "nexum-worker"}
        # A task's run span ends after everything in it: once both are here, the whole of each trace is.
        return {"run/nexum.verification.run_completion", "run/nexum.compile_context"} <= worker_names

    assert traced_worker.wait_for(both_done, timeout_s=90), sorted(
        {(span.service, span.name) for span in traced_worker.spans()}
    )
    spans = traced_worker.spans()

    completion_trace = worker_trace(spans, "nexum.verification.run_completion", "nexum.completion")
    completion = one(completion_trace, "nexum.completion")
    assert completion.attributes["nexum.completion_id"] == completing.json()["completion"]["request_id"]
    assert completion.attributes["nexum.outcome"] == "completed"
    check = one(completion_trace, "nexum.check")
    assert check.parent_id == completion.span_id
    assert check.attributes["nexum.check"] == "unit" and check.attributes["nexum.reason"] == "passed"
    assert children(completion_trace, check) == [
        "nexum.sandbox.start",
        "nexum.sandbox.run",
        "nexum.sandbox.output",
    ]

    compile_trace = worker_trace(spans, "nexum.compile_context", "nexum.compile")
    compiled = one(compile_trace, "nexum.compile")
    assert compiled.attributes["nexum.compile_id"] == queued.json()["request_id"]
    assert compiled.attributes["nexum.outcome"] == "compiled"
    assert children(compile_trace, compiled) == [f"nexum.compile.{phase}" for phase in PHASES]
    assert completion_trace[0].trace_id != compile_trace[0].trace_id  # two requests, two traces
    if connection.vendor == "postgresql":  # NEXUM_TRACE_SQL: the worker's statements are in the trace too
        statements = [span for span in compile_trace if span.attributes.get("db.system") == "postgresql"]
        assert statements and {span.service for span in statements} == {"nexum-worker"}
