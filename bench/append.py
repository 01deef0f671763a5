"""Append and rebuild throughput on PostgreSQL (run by hand; not a test).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nexum_bench .venv/bin/python bench/append.py

Compares, in one run: single-event appends through the service layer with raw psycopg single-row insert
transactions on a similar table; batch appends with raw ``executemany``; single fact appends through the
world service with embeddings on (``NEXUM_EMBEDDER``, default ``wordllama``: the fact's vector stored in the
append's transaction) and with ``NEXUM_EMBEDDER=none``; cross-project concurrency (``WRITERS`` processes
appending, each in its own project, against one and against ``WRITERS`` in one project, beside as many raw
inserting processes against one); and ``rebuild_projections`` throughput. Prints each rate and each ratio.
Uses (and resets) the database named by DATABASE_URL.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

import psycopg  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from context_app.world.embedder import configured_embedder, configured_embedder_id  # noqa: E402
from context_app.world.services.facts import fact_record  # noqa: E402
from context_app.world.services.scopes import Scope, scope_resolve  # noqa: E402
from nexum.core.tasks.projects import AgentTokenIssued, HealthPinged, project_stream  # noqa: E402
from nexum.eventstore import projections, reading, store  # noqa: E402
from tasks_app.services.goals import goal_create  # noqa: E402
from tasks_app.services.projects import project_create  # noqa: E402

SINGLE = int(os.environ.get("BENCH_SINGLE", 2000))
BATCHES = int(os.environ.get("BENCH_BATCHES", 100))
BATCH_SIZE = int(os.environ.get("BENCH_BATCH_SIZE", 100))
REBUILD_EVENTS = int(os.environ.get("BENCH_REBUILD_EVENTS", 50_000))
TOKENS_PER_PROJECT = int(os.environ.get("BENCH_TOKENS_PER_PROJECT", 500))
FACTS = int(os.environ.get("BENCH_FACTS", 1000))
FACT_ROUND = 50
EMBEDDER = os.environ.get("NEXUM_EMBEDDER", "wordllama")
FACT_TEXT = (
    "The session middleware refreshes the signed token on every request and writes the rotated value back "
    "to the cookie store (app/auth/session.py, SESSION_KEYRING); observation {index} of the staging logs."
)

WRITERS = int(os.environ.get("BENCH_WRITERS", 4))
PER_WRITER = int(os.environ.get("BENCH_PER_WRITER", 1000))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 3))


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds else float("inf")


def raw_connection() -> psycopg.Connection:
    params = connection.get_connection_params()
    return psycopg.connect(
        **{k: v for k, v in params.items() if k in {"dbname", "user", "host", "port", "password"}}
    )


RAW_TABLE = """
CREATE TABLE IF NOT EXISTS bench_raw_event (
    position bigserial PRIMARY KEY, stream_id varchar(200) NOT NULL, version integer NOT NULL,
    event_type varchar(100) NOT NULL, schema_version smallint NOT NULL, data jsonb NOT NULL,
    metadata jsonb NOT NULL, idempotency_key varchar(200), project_id uuid,
    recorded_at timestamptz NOT NULL DEFAULT now(), UNIQUE (stream_id, version));
TRUNCATE bench_raw_event;
"""
RAW_INSERT = (
    "INSERT INTO bench_raw_event (stream_id, version, event_type, schema_version, data, metadata) "
    "VALUES (%s, %s, 'HealthPinged', 1, %s, '{}')"
)


def bench_raw_single(raw: psycopg.Connection) -> float:
    stream = f"raw-{uuid.uuid4()}"
    start = time.perf_counter()
    for i in range(SINGLE):
        with raw.transaction():
            raw.execute(RAW_INSERT, (stream, i + 1, f'{{"ping_id": "{i}"}}'))
    return rate(SINGLE, time.perf_counter() - start)


def bench_raw_batches(raw: psycopg.Connection) -> float:
    start = time.perf_counter()
    for b in range(BATCHES):
        stream = f"raw-batch-{b}-{uuid.uuid4()}"
        with raw.transaction(), raw.cursor() as cursor:
            cursor.executemany(
                RAW_INSERT, [(stream, i + 1, f'{{"ping_id": "{i}"}}') for i in range(BATCH_SIZE)]
            )
    return rate(BATCHES * BATCH_SIZE, time.perf_counter() - start)


def bench_service_single() -> float:
    stream = f"svc-{uuid.uuid4()}"
    start = time.perf_counter()
    for i in range(SINGLE):
        store.append(stream_id=stream, events=[HealthPinged(ping_id=str(i))], expected_version=i)
    return rate(SINGLE, time.perf_counter() - start)


def bench_service_batches() -> float:
    start = time.perf_counter()
    for b in range(BATCHES):
        store.append(
            stream_id=f"svc-batch-{b}-{uuid.uuid4()}",
            events=[HealthPinged(ping_id=str(i)) for i in range(BATCH_SIZE)],
            expected_version=0,
        )
    return rate(BATCHES * BATCH_SIZE, time.perf_counter() - start)


def fact_scope(embedder: str) -> Scope:
    """A goal of its own for the fact appends under ``embedder``, the embedder loaded before timing."""
    settings.NEXUM_EMBEDDER = embedder
    configured_embedder()
    project = project_create(slug=f"facts-{uuid.uuid4().hex[:12]}", name="Facts", actor="bench")
    goal = goal_create(
        project_id=str(project.id),
        objective="Rotate the session keyring",
        tasks=[{"key": "s1", "objective": "Find where the keyring lives"}],
        actor="bench",
    )
    return scope_resolve(project_id=str(project.id), goal_id=str(goal.id))


def bench_fact_single(embedders: tuple[str, ...]) -> dict[str, float]:
    """Single fact appends through the world service (one event, its read model row, its vector) under each
    of ``embedders``, taking turns by rounds of FACT_ROUND appends so a change of load on a shared machine
    weighs on each alike. Returns the rate per embedder."""
    scopes = {embedder: fact_scope(embedder) for embedder in embedders}
    seconds = dict.fromkeys(embedders, 0.0)
    for start in range(0, FACTS, FACT_ROUND):
        for embedder, scope in scopes.items():
            settings.NEXUM_EMBEDDER = embedder
            began = time.perf_counter()
            for index in range(start, min(FACTS, start + FACT_ROUND)):
                fact_record(scope=scope, subject="session", text=FACT_TEXT.format(index=index), actor="bench")
            seconds[embedder] += time.perf_counter() - began
    return {embedder: rate(FACTS, spent) for embedder, spent in seconds.items()}


def _raw_writer(start_gate: multiprocessing.synchronize.Barrier) -> None:
    """One process inserting PER_WRITER rows, one transaction per row, into its own stream."""
    with raw_connection() as raw:
        stream = f"raw-{uuid.uuid4()}"
        start_gate.wait()
        for i in range(PER_WRITER):
            with raw.transaction():
                raw.execute(RAW_INSERT, (stream, i + 1, f'{{"ping_id": "{i}"}}'))


def _service_writer(project_id: str, start_gate: multiprocessing.synchronize.Barrier) -> None:
    """One process appending PER_WRITER single-event appends through ``store.append`` in ``project_id``."""
    stream = f"svc-{uuid.uuid4()}"
    start_gate.wait()
    for i in range(PER_WRITER):
        store.append(
            stream_id=stream,
            events=[HealthPinged(ping_id=str(i))],
            expected_version=i,
            project_id=project_id,
        )


def concurrent_rate(target, argument_lists: list[tuple]) -> float:  # type: ignore[no-untyped-def]
    """Events per second of ``len(argument_lists)`` processes running ``target`` together, from the moment
    all are connected and ready until the last one ends."""
    connection.close()  # a forked child must not share the parent's connection
    context = multiprocessing.get_context("fork")
    gate = context.Barrier(len(argument_lists) + 1)
    workers = [context.Process(target=target, args=(*arguments, gate)) for arguments in argument_lists]
    for worker in workers:
        worker.start()
    gate.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - start
    if any(worker.exitcode != 0 for worker in workers):
        sys.exit("a bench writer failed (see its traceback above)")
    return rate(PER_WRITER * len(argument_lists), seconds)


def bench_cross_project() -> dict[str, float]:
    """Raw inserts and service appends, one process against ``WRITERS`` processes, each in its own project:
    ``ROUNDS`` rounds of the four, interleaved so that a neighbour's load falls on all of them; the median
    rate of each."""
    projects = [
        str(project_create(slug=f"writer-{uuid.uuid4().hex[:12]}", name="Bench", actor="bench").id)
        for _ in range(WRITERS)
    ]
    with raw_connection() as raw:
        raw.execute(RAW_TABLE)
        raw.commit()
    rounds: dict[str, list[float]] = {
        "raw_one": [],
        "raw_many": [],
        "service_one": [],
        "service_many": [],
        "service_one_project": [],
    }
    for _ in range(ROUNDS):
        rounds["raw_one"].append(concurrent_rate(_raw_writer, [()]))
        rounds["raw_many"].append(concurrent_rate(_raw_writer, [()] * WRITERS))
        rounds["service_one"].append(concurrent_rate(_service_writer, [(projects[0],)]))
        rounds["service_many"].append(concurrent_rate(_service_writer, [(project,) for project in projects]))
        rounds["service_one_project"].append(concurrent_rate(_service_writer, [(projects[0],)] * WRITERS))
    figures = {name: statistics.median(rates) for name, rates in rounds.items()}
    with raw_connection() as raw:
        raw.execute("DROP TABLE bench_raw_event")
        raw.commit()
    return figures


def fill_for_rebuild() -> None:
    """A log of REBUILD_EVENTS events that all change a read model: projects, each with many agent tokens."""
    while reading.head_position() < REBUILD_EVENTS:
        project = project_create(slug=f"bench-{uuid.uuid4().hex[:12]}", name="Bench", actor="bench")
        tokens = [
            AgentTokenIssued(
                token_id=str(uuid.uuid4()),
                name=f"agent-{t}",
                key_prefix="nx_bench",
                key_sha256=uuid.uuid4().hex * 2,
                role="agent",
            )
            for t in range(TOKENS_PER_PROJECT)
        ]
        store.append(
            stream_id=project_stream(str(project.id)),
            events=tokens,
            expected_version=1,
            project_id=str(project.id),
        )


def bench_rebuild() -> tuple[int, int, float]:
    """(events in the log, events replayed through a projection, seconds)."""
    log = reading.head_position()
    start = time.perf_counter()
    replayed = projections.rebuild()
    return log, replayed, time.perf_counter() - start


def main() -> None:
    if connection.vendor != "postgresql":
        sys.exit("bench/append.py measures PostgreSQL: set DATABASE_URL=postgres://…")
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    with raw_connection() as raw:
        raw.execute(RAW_TABLE)
        raw.commit()
        raw_single = bench_raw_single(raw)
        raw_batch = bench_raw_batches(raw)
        raw.execute("DROP TABLE bench_raw_event")
        raw.commit()
    service_single = bench_service_single()
    service_batch = bench_service_batches()
    fact_rates = bench_fact_single(("none", EMBEDDER))
    facts_plain, facts_embedded = fact_rates["none"], fact_rates[EMBEDDER]
    settings.NEXUM_EMBEDDER = EMBEDDER
    embedder_name = configured_embedder_id()
    settings.NEXUM_EMBEDDER = "none"

    cross = bench_cross_project()
    fill_for_rebuild()
    log, replayed, seconds = bench_rebuild()

    print(
        f"single-event append   service {service_single:9.0f}/s   raw insert txn {raw_single:9.0f}/s   "
        f"ratio {service_single / raw_single:.2f} (goal >= 0.5)"
    )
    print(
        f"batch append ({BATCH_SIZE:>3})    service {service_batch:9.0f}/s   "
        f"raw executemany {raw_batch:8.0f}/s   "
        f"ratio {service_batch / raw_batch:.2f} (goal >= 0.3)"
    )
    print(
        f"single fact append    embedded {facts_embedded:8.0f}/s   NEXUM_EMBEDDER=none {facts_plain:8.0f}/s "
        f"ratio {facts_embedded / facts_plain:.2f} (goal >= 0.4; embedder {embedder_name})"
    )
    print(
        f"one writer, one project   service {cross['service_one']:9.0f}/s   "
        f"raw insert txn {cross['raw_one']:9.0f}/s   ratio {cross['service_one'] / cross['raw_one']:.2f}"
    )
    print(
        f"{WRITERS} writers, {WRITERS} projects service {cross['service_many']:9.0f}/s   "
        f"raw insert txn {cross['raw_many']:9.0f}/s   "
        f"service {cross['service_many'] / cross['service_one']:.2f}x one writer (goal >= 3), "
        f"raw {cross['raw_many'] / cross['raw_one']:.2f}x (medians of {ROUNDS} rounds)"
    )
    print(
        f"{WRITERS} writers, one project  service {cross['service_one_project']:9.0f}/s   "
        f"{cross['service_one_project'] / cross['service_one']:.2f}x one writer (one project's appends are "
        "serialized)"
    )
    print(
        f"rebuild_projections   log of {log} events, {replayed} projected: {log / seconds:.0f} log events/s, "
        f"{replayed / seconds:.0f} projected events/s (goal >= 20000)"
    )


if __name__ == "__main__":
    main()
