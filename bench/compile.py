"""Compile latency against world-state size (SPEC Q2; issue 5, item 9). Run by hand; not a test.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nexum_bench .venv/bin/python bench/compile.py

For world states of 1k, 10k and 50k items (a realistic mix of facts, decisions, failures, artifacts,
progress notes and tool calls, 10 to ~400 tokens each, half shared by the goal and half the task's own) and
the ``local`` card (a 70B-class model: 128K window → 24,000-token budget), it times:

* ``service``: the whole compile service in process (lock, live budget, compile, store by digest, append
  ``ContextCompiled``);
* ``compile``: reading the world state and compiling, without storage and event;
* ``rest``: ``POST /api/v1/tasks/{id}/compile`` through Django and DRF (the test client, in process);
* ``naive``: the same compile re-tokenizing every candidate item's text with tiktoken (no stored counts,
  every text loaded);
* ``cold``: the service in a process that has not compiled the task before (every in-process list, memo and
  token count emptied before each run: the whole goal is read, the block counted again);
* ``loop``: the service in an agent loop: before each compile (not timed) the agent records a tool call and
  a progress note, so every compile meets a world that changed since the previous one.

Items are inserted fast: their events (with token counts, computed once as the services do) are appended
1,000 at a time to one loading stream per batch, rather than one stream per item. The projections do not
care which stream an event is in, and nothing here changes an item later. The tables are then vacuumed and
analyzed (as autovacuum soon would after such a load): the planner knows their size, and an index-only scan
need not visit the heap. Uses (and resets) the database named by
DATABASE_URL; runs on SQLite too, but the figures that matter are PostgreSQL's.
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nexum.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from context_app.catalog.management.commands.load_model_catalog import DEFAULT_CATALOG  # noqa: E402
from context_app.catalog.services import model_catalog_replace  # noqa: E402
from context_app.compilation import selectors, services  # noqa: E402
from context_app.world.models import WorldItem  # noqa: E402
from context_app.world.services import progress_record, scope_resolve, tool_call_record, tool_define  # noqa: E402
from nexum.core import memo, world  # noqa: E402
from nexum.core.compilation.compiler import CompileInput, ContextItem  # noqa: E402
from nexum.core.compilation.compiler import compile_context as run_compiler  # noqa: E402
from nexum.core.events import Event  # noqa: E402
from nexum.eventstore import store  # noqa: E402
from nexum.tokenization import counter_for, default_registry  # noqa: E402
from tasks_app.models import Task  # noqa: E402
from tasks_app.services import agent_token_issue, goal_create, project_create, task_start  # noqa: E402

SIZES = [int(size) for size in os.environ.get("BENCH_SIZES", "1000,10000,50000").split(",")]
RUNS = int(os.environ.get("BENCH_RUNS", 30))
NAIVE_RUNS = int(os.environ.get("BENCH_NAIVE_RUNS", 5))
REST_RUNS = int(os.environ.get("BENCH_REST_RUNS", 15))
BATCH = 1000
WORD = "local"
MIX = [("fact", 30), ("progress", 25), ("tool_call", 15), ("artifact", 12), ("decision", 10), ("failure", 8)]
_WORDS = (
    "auth token session cookie redis cache spec rspec middleware signed hmac rotate refresh login user "
    "password hash bcrypt database schema migration index query latency timeout retry queue worker deploy "
    "staging production log error failure line stack trace request response header status config env "
    "secret key store expire ttl validate parse json payload route controller model view test fixture mock"
)
DOMAIN = _WORDS.split(" ")
_SYLLABLE_TEXT = "kalominerusativoxezubadefigohujakelimonu"
_SYLLABLES = [_SYLLABLE_TEXT[i : i + 2] for i in range(0, len(_SYLLABLE_TEXT), 2)]
# A few thousand distinct words, domain words among them: most items share a word or two with the goal.
VOCABULARY = DOMAIN + [a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES[:8]]


def sentence(rng: random.Random, words: int) -> str:
    return (
        " ".join(
            rng.choice(DOMAIN) if rng.random() < 0.1 else rng.choice(VOCABULARY) for _ in range(words)
        ).capitalize()
        + "."
    )


def text_of(rng: random.Random) -> str:
    """10 to ~400 tokens, most short: a long tail like real notes and tool output."""
    words = int(min(300, max(6, rng.lognormvariate(3.4, 0.8))))
    return " ".join(sentence(rng, 12) for _ in range(max(1, words // 12)))


def item_event(rng: random.Random, kind: str, goal_id: str, task_id: str, counter: object) -> Event:
    scope_task = task_id if rng.random() < 0.5 or kind in ("failure", "progress", "tool_call") else None
    text = text_of(rng)
    common = {"item_id": str(uuid.uuid4()), "goal_id": goal_id, "task_id": scope_task, "text": text}
    common["trust_class"] = "untrusted_retrieved" if rng.random() < 0.05 else "repository_authored"
    if kind == "fact":
        subject = rng.choice(VOCABULARY)
        rendered = world.render_fact(text, subject=subject, source="docs/notes.md")
        return world.FactRecorded(
            **common,
            token_counts=world.token_counts(rendered, [counter]),
            terms=list(world.item_terms(subject, text)),
            source="docs/notes.md",
            subject=subject,
            verified=rng.random() < 0.2,
        )
    if kind == "decision":
        rendered = world.render_decision(text, rationale="it keeps the spec green")
        return world.DecisionRecorded(
            **common,
            token_counts=world.token_counts(rendered, [counter]),
            terms=list(world.item_terms(text)),
            rationale="it keeps the spec green",
        )
    if kind == "failure":
        rendered = world.render_failure(text, attempt=1)
        return world.FailureRecorded(
            **common,
            token_counts=world.token_counts(rendered, [counter]),
            terms=list(world.item_terms(text)),
            attempt=1,
        )
    if kind == "artifact":
        uri = f"artifact://results/{rng.randrange(10**6)}"
        rendered = world.render_artifact(uri=uri, summary=text, excerpt="", media_type="text/plain")
        return world.ArtifactRecorded(
            **common,
            token_counts=world.token_counts(rendered, [counter]),
            terms=list(world.item_terms(text)),
            uri=uri,
            media_type="text/plain",
        )
    if kind == "progress":
        return world.ProgressRecorded(
            **common, token_counts=world.token_counts(text, [counter]), terms=list(world.item_terms(text))
        )
    digest = uuid.uuid4().hex * 2
    rendered = world.render_tool_call(tool="rspec", arguments_digest=digest, result_summary=text)
    return world.ToolCallRecorded(
        **common,
        token_counts=world.token_counts(rendered, [counter]),
        terms=list(world.item_terms(f"rspec {text}")),
        tool="rspec",
        arguments_digest=digest,
    )


def build_world(size: int) -> tuple[str, Task, str]:
    rng = random.Random(size)
    project = project_create(slug=f"bench-{size}", name=f"Bench {size}", actor="bench")
    project_id = str(project.id)
    document = json.loads(DEFAULT_CATALOG.read_text())
    model_catalog_replace(project_id=project_id, catalog=document, actor="bench")
    goal = goal_create(
        project_id=project_id,
        objective="Fix the failing authentication spec",
        constraints=["Do not modify the database schema"],
        tasks=[
            {
                "key": "s3",
                "objective": "Make auth_spec.rb pass: the signed session token fails validation",
                "inputs": ["spec/auth_spec.rb", "app/models/session.rb"],
                "success_criteria": ["bundle exec rspec spec/auth_spec.rb exits 0"],
            }
        ],
        actor="bench",
    )
    task = Task.objects.get(goal_id=goal.id, key="s3")
    task_start(project_id=project_id, task_id=str(task.id), actor="bench")
    for index in range(20):
        tool_define(
            project_id=project_id,
            name=f"tool_{index:02d}",
            description=f"{sentence(rng, 10)} Works on {rng.choice(VOCABULARY)} files.",
            schema={
                "type": "object",
                "properties": {"path": {"type": "string"}, "query": {"type": "string"}},
            },
            actor="bench",
        )
    counter = counter_for("cl100k_base")
    kinds = [kind for kind, weight in MIX for _ in range(weight)]
    for start in range(0, size, BATCH):
        events = [
            item_event(rng, rng.choice(kinds), str(goal.id), str(task.id), counter)
            for _ in range(min(BATCH, size - start))
        ]
        store.append(
            stream_id=f"benchload-{project_id}-{start}",
            events=events,
            expected_version=0,
            project_id=project_id,
            metadata={"actor": "bench"},
        )
    key = agent_token_issue(project_id=project_id, name="bench", actor="bench").key
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
    return project_id, Task.objects.get(id=task.id), key


def naive_compile(task: Task) -> None:
    """Every candidate's text loaded and re-tokenized with tiktoken (no stored counts, no cache)."""
    tokenizer = default_registry().tokenizer("cl100k_base")
    counter = counter_for("cl100k_base")
    choice = services.catalog_selectors.budget_for(project_id=str(task.project_id), word=WORD)
    task_input = selectors.compile_input_for(task=task, encoding="cl100k_base", counter=counter)
    texts = dict(
        selectors._task_items(task).values_list("id", "rendered")  # every text
    )
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
                    world.line_count(text),
                    item.position,
                    item.verified,
                    tuple(world.item_terms(text)),
                    item.trust_class,
                    item.origin,
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
    run_compiler(naive_input, budget=choice.budget, counter=counter)


def timed(function, runs: int, before=None) -> list[float]:
    times = []
    for run in range(runs):
        if before is not None:
            before(run)
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1000)
    return times


def p(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def forget_everything(run: int) -> None:
    selectors._TASKS.clear()
    selectors._ITEMS.clear()
    memo.forget()
    counter_for("cl100k_base")._cache.clear()


def bench_size(size: int) -> dict[str, list[float]]:
    started = time.perf_counter()
    project_id, task, key = build_world(size)
    loaded = time.perf_counter() - started
    items = WorldItem.objects.filter(project_id=project_id).count()
    choice = services.catalog_selectors.budget_for(project_id=project_id, word=WORD)

    def service() -> None:
        services.context_compile(project_id=project_id, task_id=str(task.id), model_word=WORD, actor="bench")

    def compile_only() -> None:
        services.compile_task(task=task, budget=choice.budget, encoding="cl100k_base")

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    def rest() -> None:
        response = client.post(f"/api/v1/tasks/{task.id}/compile", {"model": WORD}, format="json")
        assert response.status_code == 200, response.content[:500]

    scope = scope_resolve(project_id=project_id, task_id=str(task.id))

    def agent_step(run: int) -> None:
        tool_call_record(
            scope=scope, tool="rspec", result_summary=f"run {run}: 2 failures in auth_spec.rb", actor="bench"
        )
        progress_record(scope=scope, text=f"step {run}: tried rotating the session token", actor="bench")

    service()  # warm up: tokenizer loaded, the context stored once
    outcome = services.context_compile(
        project_id=project_id, task_id=str(task.id), model_word=WORD, actor="b"
    )
    runs = {
        "service": timed(service, RUNS),
        "compile": timed(compile_only, RUNS),
        "rest": timed(rest, REST_RUNS),
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
        print(f"  {name:<8} p50 {p(times, 0.5):8.1f} ms   p95 {p(times, 0.95):8.1f} ms")
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
    print(
        f"database: {connection.vendor}; model word {WORD!r}; "
        f"runs {RUNS} (naive {NAIVE_RUNS}, REST {REST_RUNS})"
    )
    results = {size: bench_size(size) for size in SIZES}
    if 1000 in results and 50000 in results:
        print()
        for name in ("service", "compile", "rest", "loop"):
            ratio = statistics.median(results[50000][name]) / statistics.median(results[1000][name])
            print(f"{name:<8} 50k / 1k p50 ratio {ratio:5.2f} (goal <= 3)")
    if 10000 in results:
        print(f"service p50 at 10k: {statistics.median(results[10000]['service']):.1f} ms (goal <= 50 ms)")


if __name__ == "__main__":
    main()
