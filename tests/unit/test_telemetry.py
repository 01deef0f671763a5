"""The span helper (nexum.adapters.telemetry): attributes under ``nexum.``, ``None`` left out, errors
recorded, nested spans parented, and back to the shared no-op once tracing stops."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from nexum.adapters import telemetry


@pytest.fixture
def exported():
    exporter = InMemorySpanExporter()
    provider = telemetry.new_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.start_tracing(provider)
    try:
        yield exporter
    finally:
        telemetry.stop_tracing()
        provider.shutdown()


def test_attributes_are_named_under_nexum_and_none_is_left_out(exported):
    with telemetry.span("nexum.compile", project_id="p1", digest=None) as traced:
        traced.set(tokens_used=120, outcome="compiled", excluded_count=None)
    [span] = exported.get_finished_spans()
    assert span.name == "nexum.compile"
    assert dict(span.attributes) == {
        "nexum.project_id": "p1",
        "nexum.tokens_used": 120,
        "nexum.outcome": "compiled",
    }
    assert span.resource.attributes["service.name"] == "nexum"


def test_a_phase_is_a_child_of_the_span_around_it(exported):
    with telemetry.span("nexum.compile"), telemetry.phase_span("pack"):
        pass
    pack, compiled = exported.get_finished_spans()
    assert (pack.name, dict(pack.attributes)) == ("nexum.compile.pack", {"nexum.phase": "pack"})
    assert pack.parent.span_id == compiled.context.span_id


def test_an_exception_leaving_a_span_marks_it_as_an_error_and_propagates(exported):
    with pytest.raises(ValueError, match="bad budget"), telemetry.span("nexum.compile"):
        raise ValueError("bad budget")
    [span] = exported.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]


def test_once_stopped_a_span_is_the_shared_no_op_and_nothing_is_exported(exported):
    telemetry.stop_tracing()
    assert not telemetry.tracing_on()
    with telemetry.span("nexum.compile", project_id="p1") as off:
        off.set(outcome="compiled")
    assert telemetry.span("a") is telemetry.span("b")
    assert exported.get_finished_spans() == ()


def test_tracing_from_the_environment_is_off_without_an_endpoint(monkeypatch):
    monkeypatch.delenv(telemetry.ENDPOINT_VARIABLE, raising=False)
    assert telemetry.tracing_from_environment() is False
    assert not telemetry.tracing_on()


def test_sql_statements_are_traced_only_when_asked_for():
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    provider = telemetry.new_provider()
    try:
        telemetry.start_tracing(provider)
        assert not PsycopgInstrumentor().is_instrumented_by_opentelemetry
        telemetry.start_tracing(provider, statements=True)
        assert PsycopgInstrumentor().is_instrumented_by_opentelemetry
    finally:
        telemetry.stop_tracing()
        provider.shutdown()
    assert not PsycopgInstrumentor().is_instrumented_by_opentelemetry
