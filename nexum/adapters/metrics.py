"""Prometheus metrics of what the processes do: the one place they are defined and recorded.

Counters and histograms are recorded where the work happens (a request answered, a compile recorded, a
gate decision, a lease taken over, a check that failed) through the functions below, never with
``prometheus_client`` directly, so that every metric, its labels and its buckets are read here. Gauges of the
current state (requests pending and stuck, the webhook backlog, the log's head) are not recorded: the
``/metrics`` view computes them from the database when it is scraped (``nexum_web.api.metrics``).

Several processes serve one deployment (gunicorn's workers, each Celery pool's children): with
``PROMETHEUS_MULTIPROC_DIR`` set (``deploy/serve.sh`` sets it for all of them, and empties it at start)
``prometheus_client`` keeps each process's values in a file of that folder and a scrape sums the files, so a
count is the deployment's whatever process answers the scrape. Without it (``make run``, tests) the values are
this process's. The variable must be set before ``prometheus_client`` is first imported: it chooses where
values live then.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROCESS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

PROCESS_REGISTRY = CollectorRegistry()
"""This process's metrics (a registry of its own: the scrape chooses what else it shows)."""

TOKEN_BUCKETS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)

REQUEST_SECONDS = Histogram(
    "nexum_http_request_duration_seconds",
    "Time to answer an HTTP request (until its headers), by the URL pattern it matched, method and status",
    ["route", "method", "status"],
    registry=PROCESS_REGISTRY,
)
COMPILE_SECONDS = Histogram(
    "nexum_compile_duration_seconds",
    "Time to compile and record a context (reads, ranking, packing, recording), by model word",
    ["model"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=PROCESS_REGISTRY,
)
COMPILE_TOKENS = Histogram(
    "nexum_compile_tokens",
    "Tokens a compiled context uses (prompt block and tool schemas), by model word",
    ["model"],
    buckets=TOKEN_BUCKETS,
    registry=PROCESS_REGISTRY,
)
COMPLETIONS = Counter(
    "nexum_completions",
    "Completion requests the gate decided, by outcome (completed, failed, blocked, skipped)",
    ["outcome"],
    registry=PROCESS_REGISTRY,
)
LEASE_TAKEOVERS = Counter(
    "nexum_lease_takeovers",
    "Leases of requests in flight taken from a holder that died or stopped renewing, by work kind",
    ["kind"],
    registry=PROCESS_REGISTRY,
)
CHECK_FAILURES = Counter(
    "nexum_check_failures",
    "Checks the sandbox ran that failed, by check kind and reason (timeout, crashed, sandbox_unavailable …)",
    ["kind", "reason"],
    registry=PROCESS_REGISTRY,
)

UNMATCHED_ROUTE = "(unmatched)"
"""The route of a request that matched no URL pattern: a path never becomes a label."""


def request_answered(*, route: str | None, method: str, status: int, seconds: float) -> None:
    """``route``: the URL pattern the request matched (Django's, without its leading slash), None for none."""
    label = UNMATCHED_ROUTE if route is None else f"/{route}"
    REQUEST_SECONDS.labels(label, method, str(status)).observe(seconds)


def compile_recorded(*, model_word: str, seconds: float, tokens: int) -> None:
    COMPILE_SECONDS.labels(model_word).observe(seconds)
    COMPILE_TOKENS.labels(model_word).observe(tokens)


def completion_decided(*, outcome: str) -> None:
    COMPLETIONS.labels(outcome).inc()


def lease_taken_over(*, kind: str) -> None:
    LEASE_TAKEOVERS.labels(kind).inc()


def check_failed(*, kind: str, reason: str) -> None:
    CHECK_FAILURES.labels(kind, reason).inc()


def multiprocess_dir() -> str:
    """The folder the processes keep their values in ("" when each process keeps its own)."""
    return os.environ.get(MULTIPROCESS_DIR_VARIABLE, "")


class _ThisProcess:
    """The process registry's metrics, as a collector of the scrape's registry."""

    def collect(self) -> Iterator[Any]:
        return PROCESS_REGISTRY.collect()


def exposition(state: Iterable[Any] = ()) -> tuple[bytes, str]:
    """The text a scrape answers and its content type: the processes' metrics (summed across the processes
    of ``PROMETHEUS_MULTIPROC_DIR``, else this process's) and the ``state`` collectors' (computed now). The
    format is Prometheus' text format 0.0.4, which every Prometheus server reads (every name here is one)."""
    registry = CollectorRegistry()
    if multiprocess_dir():
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    for collector in state:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4
