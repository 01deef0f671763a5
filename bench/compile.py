"""Compile latency against world-state size (SPEC Q2; issue 5, item 9). Run by hand; not a test.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nexum_bench .venv/bin/python bench/compile.py

For world states of 1k, 10k and 50k items (a realistic mix of facts, decisions, failures, artifacts,
progress notes and tool calls, 10 to ~400 tokens each, half shared by the goal and half the task's own) and
the ``local`` card (a 70B-class model: 128K window → 24,000-token budget), it times:

* ``service``: the whole compile service in process (lock, live budget, compile, store by digest, append
  ``ContextCompiled``);
* ``compile``: reading the world state and compiling, without storage and event;
* ``rest``: ``POST /api/v1/tasks/{id}/compile`` through Django and DRF (the test client, in process), the
  answer gzipped as for a client that accepts it (httpx, curl ``--compressed``), timed in turn with
  ``service`` so that both meet the same load;
* ``naive``: the same compile re-tokenizing every candidate item's text with tiktoken (no stored counts,
  every text loaded);
* ``cold``: the service in a process that has not compiled the task before (every in-process list, memo and
  token count emptied before each run: the whole goal is read with its stored vectors, the block counted
  again);
* ``loop``: the service in an agent loop: before each compile (not timed) the agent records a tool call and
  a progress note, so every compile meets a world that changed since the previous one;
* ``traced``: the service with tracing on (``nexum.adapters.telemetry``: Nexum's spans, batched and
  exported by OTLP/HTTP to a receiver in a process of its own, ``tests/otlp_receiver.py``) against
  ``untraced`` (off), and ``traced_sql``, with a span per SQL statement too (``NEXUM_TRACE_SQL``), against
  ``untraced_new``: the two with the connection opened again before each run (not timed), so that its
  statements are traced or not (a new connection's first compile is slower, so it has a baseline of its own);
  the four timed in turn. ``BENCH_TRACING=0`` leaves them out.

The world is bench/worlds.py's (items inserted fast, 1,000 events per append; the tables then vacuumed and
analyzed, as autovacuum soon would after such a load: the planner knows their size, and an index-only scan
need not visit the heap). It also prints the size of the compile's answer, compact (the default) and with
``?excluded=full``, and how much the REST endpoint adds to the service. Uses (and resets) the database named
by DATABASE_URL; runs on SQLite too, but the figures that matter are PostgreSQL's.

Embeddings: the world's facts and tool calls get their vectors by ``NEXUM_EMBEDDER`` (default ``wordllama``)
as they are loaded, and a compile from version 5 reads them and embeds its query. ``BENCH_RANK_BY_MEANING=1``
makes compiles of the current version do the same (``compile_input.VECTORS_FROM``), to measure that cost
before the ranking of version 5 exists; the first line says which embedder compiles rank by.
"""

from __future__ import annotations

import gzip
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402
from worlds import build_world  # noqa: E402  (bench/worlds.py, beside this script)

from context_app.catalog.selectors import budget_for  # noqa: E402
from context_app.compilation.candidate_rows import task_items  # noqa: E402
from context_app.compilation.candidates import CANDIDATES  # noqa: E402
from context_app.compilation.selectors import compile_input  # noqa: E402
from context_app.compilation.services.compiles import compile_task, context_compile  # noqa: E402
from context_app.world.embedder import configured_embedder_id  # noqa: E402
from context_app.world.models import WorldItem  # noqa: E402
from context_app.world.services.records import progress_record, tool_call_record  # noqa: E402
from context_app.world.services.scopes import scope_resolve  # noqa: E402
from nexum.adapters import telemetry  # noqa: E402
from nexum.adapters.tokenization import counter_for, default_registry  # noqa: E402
from nexum.core.compilation.compiler import compile_context  # noqa: E402
from nexum.core.compilation.model import CompileInput, ContextItem  # noqa: E402
from nexum.core.compilation.versions import COMPILER_VERSION  # noqa: E402
from nexum.core.world.items import item_terms, line_count  # noqa: E402
from tasks_app.models import Task  # noqa: E402

SIZES = [int(size) for size in os.environ.get("BENCH_SIZES", "1000,10000,50000").split(",")]
RUNS = int(os.environ.get("BENCH_RUNS", 30))
NAIVE_RUNS = int(os.environ.get("BENCH_NAIVE_RUNS", 5))
REST_RUNS = int(os.environ.get("BENCH_REST_RUNS", 15))
WORD = "local"
TRACING = os.environ.get("BENCH_TRACING", "1") == "1"
if os.environ.get("BENCH_RANK_BY_MEANING") == "1":
    compile_input.VECTORS_FROM = COMPILER_VERSION


def naive_compile(task: Task) -> None:
    """Every candidate's text loaded and re-tokenized with tiktoken (no stored counts, no cache)."""
    tokenizer = default_registry().tokenizer("cl100k_base")
    counter = counter_for("cl100k_base")
    choice = budget_for(project_id=str(task.project_id), word=WORD)
    task_input = compile_input.compile_input_for(task=task, encoding="cl100k_base", counter=counter)
    texts = dict(task_items(task).values_list("id", "rendered"))  # every text
    base = task_input.compile_input

    def recounted(items: tuple[ContextItem, ...]) -> tuple[ContextItem, ...]:
        result = []
        for item in items:
            text = texts[uuid.UUID(item.id)]
            result.append(
                ContextItem(
                    item.kind,
                    item.id,
                    tokenizer.count(text),
                    line_count(text),
                    item.position,
                    item.verified,
                    tuple(item_terms(text)),
                    item.trust_class,
                    item.origin,
                    item.observed,
                    text,
                )
            )
        return tuple(result)

    naive_input = CompileInput(
        goal=base.goal,
        step=base.step,
        constraints=base.constraints,
        success_criteria=base.success_criteria,
        failures=recounted(base.failures),
        decisions=recounted(base.decisions),
        facts=recounted(base.facts),
        artifacts=recounted(base.artifacts),
        progress=recounted(base.progress),
        evidence=recounted(base.evidence),
        tools=base.tools,
    )
    compile_context(naive_input, budget=choice.budget, counter=counter)


def timed(function, runs: int, before=None) -> list[float]:
    times = []
    for run in range(runs):
        if before is not None:
            before(run)
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1000)
    return times


def timed_in_turn(functions: dict[str, Callable[[], None]], runs: int) -> dict[str, list[float]]:
    """Each function timed ``runs`` times, taking turns, so a change of load on a shared machine weighs on all
    of them alike and their difference is the work's, not the moment's."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(runs):
        for name, function in functions.items():
            times[name] += timed(function, 1)
    return times


def p(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class TracedRuns:
    """Tracing switched on and off around runs, exporting to a receiver in a process of its own."""

    def __init__(self) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        root = Path(__file__).resolve().parents[1]
        self.receiver = subprocess.Popen(
            [sys.executable, "-m", "tests.otlp_receiver"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.receiver.stdout is not None
        endpoint = self.receiver.stdout.readline().strip()
        self.provider = telemetry.new_provider()
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{endpoint}/v1/traces")))

    def switch(self, on: bool, statements: bool = False, reconnect: bool = False) -> None:
        if on:
            telemetry.start_tracing(self.provider, statements=statements)
        else:
            telemetry.stop_tracing()
        if reconnect:  # the next statement opens a connection traced (or not) as tracing now is
            connection.close()
            connection.ensure_connection()

    def spans_received(self) -> int:
        """Ends tracing and the receiver; how many spans it received."""
        telemetry.stop_tracing()
        self.provider.shutdown()  # exports what is still batched
        output, _ = self.receiver.communicate("", timeout=60)
        return int(output.split()[-1])


TRACING_MODES = {
    "traced_sql": (True, True, True),
    "untraced_new": (False, False, True),
    "untraced": (False, False, False),
    "traced": (True, False, False),
}
"""Each mode's (tracing on, a span per SQL statement, a new connection before the run), in the order they
take turns: a connection opened while statements were traced stays traced, so the two modes that keep their
connection follow ``untraced_new``, which opened one untraced."""


def off_and_on_in_turn(
    function: Callable[[], None], runs: int, tracing: TracedRuns
) -> dict[str, list[float]]:
    """``function`` timed ``runs`` times in each of ``TRACING_MODES``, taking turns (as ``timed_in_turn``)."""
    times: dict[str, list[float]] = {name: [] for name in TRACING_MODES}
    for _ in range(runs):
        for name, (on, statements, reconnect) in TRACING_MODES.items():
            tracing.switch(on=on, statements=statements, reconnect=reconnect)
            times[name] += timed(function, 1)
    tracing.switch(on=False, reconnect=True)
    return times


def forget_everything(run: int) -> None:
    CANDIDATES.clear()
    counter_for("cl100k_base")._cache.clear()
    compile_input._EVIDENCE_VECTORS.clear()


def bench_size(size: int) -> dict[str, list[float]]:
    started = time.perf_counter()
    built = build_world(slug=f"bench-{size}", size=size)
    project_id, task, key = built.project_id, built.tasks[0], built.agent_key
    loaded = time.perf_counter() - started
    items = WorldItem.objects.filter(project_id=project_id).count()
    choice = budget_for(project_id=project_id, word=WORD)

    def service() -> None:
        context_compile(project_id=project_id, task_id=str(task.id), model_word=WORD, actor="bench")

    def compile_only() -> None:
        compile_task(task=task, budget=choice.budget, encoding="cl100k_base")

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    sizes: dict[str, int] = {}

    def rest(view: str = "summary") -> None:
        query = "?excluded=full" if view == "full" else ""
        response = client.post(
            f"/api/v1/tasks/{task.id}/compile{query}",
            {"model": WORD},
            format="json",
            HTTP_ACCEPT_ENCODING="gzip",
        )
        assert response.status_code == 200, response.content[:500]
        sizes[view] = len(gzip.decompress(response.content))
        sizes[f"{view}_gzip"] = len(response.content)

    scope = scope_resolve(project_id=project_id, task_id=str(task.id))

    def agent_step(run: int) -> None:
        tool_call_record(
            scope=scope, tool="rspec", result_summary=f"run {run}: 2 failures in auth_spec.rb", actor="bench"
        )
        progress_record(scope=scope, text=f"step {run}: tried rotating the session token", actor="bench")

    service()  # warm up: tokenizer loaded, the context stored once
    outcome = context_compile(project_id=project_id, task_id=str(task.id), model_word=WORD, actor="b")
    tracing = TracedRuns() if TRACING else None
    traced = off_and_on_in_turn(service, RUNS, tracing) if tracing is not None else {}
    spans = tracing.spans_received() if tracing is not None else 0
    runs = {
        **timed_in_turn({"service": service, "rest": rest}, RUNS),
        **traced,
        "compile": timed(compile_only, RUNS),
        "rest_full": timed(lambda: rest("full"), REST_RUNS),
        "naive": timed(lambda: naive_compile(task), NAIVE_RUNS),
        "cold": timed(service, NAIVE_RUNS, before=forget_everything),
        "loop": timed(service, RUNS, before=agent_step),
    }
    context = outcome.context
    print(
        f"\n{size:>6} items ({items} stored, loaded in {loaded:.1f}s): "
        f"budget {choice.budget.context_tokens}, included {len(context.included)}, "
        f"excluded {context.excluded_count}, "
        f"block {context.prompt_tokens} + tools {context.tool_tokens} tokens"
    )
    for name, times in runs.items():
        print(f"  {name:<9} p50 {p(times, 0.5):8.1f} ms   p95 {p(times, 0.95):8.1f} ms")
    block = len(context.prompt_block.encode()) / 1024
    print(
        f"  answer   {sizes['summary_gzip'] / 1024:.1f} KiB gzipped, {sizes['summary'] / 1024:.1f} KiB of "
        f"JSON (prompt block {block:.1f} KiB); with ?excluded=full {sizes['full_gzip'] / 1024:.1f} KiB "
        f"gzipped, {sizes['full'] / 1024:.1f} KiB of JSON (goal <= 64 KiB by default)"
    )
    print(
        f"  rest - service p50 {statistics.median(runs['rest']) - statistics.median(runs['service']):.1f} ms"
        " (goal <= 15 ms)"
    )
    if traced:
        for name, baseline in (("traced", "untraced"), ("traced_sql", "untraced_new")):
            on, off = statistics.median(traced[name]), statistics.median(traced[baseline])
            print(
                f"  {name} vs {baseline} (in turn) p50 overhead {(on / off - 1) * 100:+.1f} % "
                f"({on - off:+.1f} ms; goal <= 5 %)"
            )
        print(f"  {spans} spans received for {2 * len(traced['traced'])} traced compiles")
    print(f"  process max RSS so far {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    naive = statistics.median(runs["naive"])
    print(
        f"  naive / compile {naive / statistics.median(runs['compile']):5.1f}x   "
        f"naive / service {naive / statistics.median(runs['service']):5.1f}x   (goal >= 10x)"
    )
    return runs


def main() -> None:
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    ranked_by = configured_embedder_id() if COMPILER_VERSION >= compile_input.VECTORS_FROM else ""
    print(
        f"database: {connection.vendor}; model word {WORD!r}; "
        f"runs {RUNS} (naive {NAIVE_RUNS}, REST with ?excluded=full {REST_RUNS}); compiler version "
        f"{COMPILER_VERSION}, ranked by {ranked_by or 'words alone'}"
    )
    results = {size: bench_size(size) for size in SIZES}
    if 1000 in results and 50000 in results:
        print()
        for name in ("service", "compile", "rest", "loop"):
            ratio = statistics.median(results[50000][name]) / statistics.median(results[1000][name])
            print(f"{name:<8} 50k / 1k p50 ratio {ratio:5.2f} (goal <= 3)")
    for size, goal in ((10000, 60), (50000, 150)):
        if size in results:
            warm = statistics.median(results[size]["service"])
            cold = statistics.median(results[size]["cold"])
            print(f"service p50 at {size // 1000}k: {warm:.1f} ms (goal <= {goal} ms)")
            ratio = cold / warm
            print(f"cold compile at {size // 1000}k: {cold:.1f} ms, {ratio:.1f}x the warm p50 (goal <= 3x)")


if __name__ == "__main__":
    main()
