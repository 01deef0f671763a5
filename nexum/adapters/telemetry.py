"""Traces (OpenTelemetry): the one place Nexum's code names a span.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (``tracing_from_environment``, called as every process
starts: web, worker, management command). Off, no SDK is loaded, no provider exists and ``span`` returns
one shared object that does nothing, so an instrumented call costs a function call and a global read.

On, spans go by OTLP/HTTP (protobuf) to ``$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces`` in batches (the SDK's
``OTEL_BSP_*`` and ``OTEL_EXPORTER_OTLP_*`` variables apply; ``OTEL_SERVICE_NAME`` names the service,
``nexum`` by default). Besides Nexum's own spans, the Django (one span per request, with Nexum's request
id) and Celery (publish and run, the trace context carried in the message's headers, never in its
arguments) instrumentations are turned on with the same provider, and psycopg's (one span per SQL statement)
with ``NEXUM_TRACE_SQL=1``: it is the costly part (bench/compile.py: a compile makes about 28 statements),
so it is asked for, not the default.

Attributes are given by short names (``project_id=...``) and exported under ``nexum.`` (``nexum.project_id``),
so a user searches every span by one vocabulary: ``ATTRIBUTES`` lists it. ``None`` values are left out.
This module imports no Django and no app: the adapters beside the core (the sandbox) use it too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
DEFAULT_SERVICE_NAME = "nexum"
REQUEST_ID_HEADER = "X-Request-ID"

ATTRIBUTES = {
    "project_id": "the project",
    "task_id": "the task (or goal) compiled, resolved or completed",
    "model_word": "the model word a compile was made for",
    "budget_tokens": "the compile's context budget in tokens",
    "tokens_used": "the compiled prompt block's tokens plus its tools'",
    "excluded_count": "how many candidate items the compile left out",
    "digest": "the compiled context's digest, or the resolved bundle's",
    "outcome": "what came of it: compiled, failed, passed, the gate's outcome, a delivery's state",
    "request_id": "the HTTP request's id (X-Request-ID; on the request's span)",
    "compile_id": "the compile request's id (the id a queued compile's worker task carries)",
    "completion_id": "the completion request's id (the id its worker task carries)",
    "delivery_id": "the webhook delivery's id (the id its worker task carries)",
    "attempt": "the webhook delivery's attempt number",
    "resolve_id": "the resolve's id",
    "check": "the check's name",
    "check_kind": "the check's kind (command, file_exists, ...)",
    "reason": "a check's reason (passed, exit_nonzero, timeout, ...)",
    "phase": "the compile phase: read, rank, pack, render, record",
}
"""Every attribute Nexum sets, by its short name (exported as ``nexum.<name>``)."""

_tracer: Any = None
"""The tracer of the provider in use, None while tracing is off."""
_instrumented: list[Any] = []


class _NoSpan:
    """What ``span`` gives while tracing is off: a context manager whose ``set`` does nothing."""

    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc_info: object) -> bool:
        return False

    def set(self, **attributes: Any) -> None:
        """Nothing to record."""


_NO_SPAN = _NoSpan()


class Span:
    """A live span: ``set`` adds attributes learnt while it runs (tokens used, the outcome)."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, **attributes: Any) -> None:
        self._span.set_attributes(_named(attributes))


def tracing_on() -> bool:
    return _tracer is not None


def span(name: str, **attributes: Any) -> Any:
    """A span named ``name`` (a child of the current one) for the ``with`` block, with ``attributes``
    (short names, see ``ATTRIBUTES``); a no-op at once while tracing is off. An exception leaving the block
    is recorded on the span and marks it as an error."""
    if _tracer is None:
        return _NO_SPAN
    return _live_span(name, attributes)


@contextmanager
def _live_span(name: str, attributes: dict[str, Any]) -> Iterator[Span]:
    with _tracer.start_as_current_span(name, attributes=_named(attributes)) as live:
        yield Span(live)


def phase_span(name: str) -> Any:
    """The compiler's phase timer (``nexum.core.compilation.compiler.compile_context(phase=...)``): the
    core names its phases without importing anything from here."""
    return span(f"nexum.compile.{name}", phase=name)


def _named(attributes: dict[str, Any]) -> dict[str, Any]:
    return {f"nexum.{key}": value for key, value in attributes.items() if value is not None}


def tracing_from_environment(*, statements: bool = False) -> bool:
    """Turn tracing on with an OTLP/HTTP exporter when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (once per
    process; the global provider is set too, for any other library's instrumentation); False when off.
    ``statements``: a span for every SQL statement too (``NEXUM_TRACE_SQL``)."""
    if _tracer is not None or not os.environ.get(ENDPOINT_VARIABLE):
        return _tracer is not None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = new_provider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    start_tracing(provider, statements=statements)
    return True


def new_provider() -> Any:
    """An SDK tracer provider named by ``OTEL_SERVICE_NAME`` (``nexum`` by default)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    name = os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    return TracerProvider(resource=Resource.create({SERVICE_NAME: name}))


def start_tracing(provider: Any, *, statements: bool = False) -> None:
    """Trace with ``provider`` from now on: Nexum's spans and the Django and Celery instrumentations, and
    with ``statements`` psycopg's (a span per SQL statement on PostgreSQL, on connections opened from now
    on). A test passes a provider with an exporter of its own, and ends with ``stop_tracing``."""
    global _tracer
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    stop_tracing()
    _tracer = provider.get_tracer("nexum")
    DjangoInstrumentor().instrument(tracer_provider=provider, response_hook=_request_id_on_span)
    CeleryInstrumentor().instrument(tracer_provider=provider)
    _instrumented[:] = [DjangoInstrumentor(), CeleryInstrumentor()]
    if statements:
        PsycopgInstrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
        _instrumented.append(PsycopgInstrumentor())


def stop_tracing() -> None:
    """Back to off: the instrumentations removed, ``span`` a no-op again (a connection already opened
    while on keeps its traced cursors until it is closed)."""
    global _tracer
    for instrumentor in _instrumented:
        instrumentor.uninstrument()
    _instrumented.clear()
    _tracer = None


def _request_id_on_span(span: Any, request: Any, response: Any) -> None:
    """The Django request span carries the id ``nexum.adapters.logs.RequestIdMiddleware`` gave the request (in
    the response by then), so a trace is found from an error body's ``request_id`` or a log line."""
    request_id = response.get(REQUEST_ID_HEADER) if hasattr(response, "get") else None
    if request_id and span.is_recording():
        span.set_attribute("nexum.request_id", request_id)
