"""World states for the benchmarks (bench/compile.py, bench/agents.py, bench/rotation.py). Not a test.

A goal of ``size`` items — a realistic mix of facts, decisions, failures, artifacts, progress notes and tool
calls, 10 to ~400 tokens each — some shared by the goal, the rest owned by its tasks. Items are inserted
fast: their events (with token counts, computed once as the services do) are appended 1,000 at a time to one
loading stream per batch, rather than one stream per item; the projections do not care which stream an
event is in, and nothing here changes an item later. Django must be set up before this module is imported.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass

from django.db import connection

from context_app.catalog.services import DEFAULT_CATALOG, model_catalog_replace
from context_app.world.services.tools import tool_define
from nexum.adapters.tokenization import counter_for
from nexum.core.events import DomainEvent
from nexum.core.world.items import (
    ArtifactRecorded,
    DecisionRecorded,
    FactRecorded,
    FailureRecorded,
    ProgressRecorded,
    ToolCallRecorded,
    item_terms,
    render_artifact,
    render_decision,
    render_fact,
    render_failure,
    render_tool_call,
    token_counts,
)
from nexum.eventstore import store
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start
from tasks_app.services.projects import project_create
from tasks_app.services.tokens import agent_token_issue

BATCH = 1000
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
FIRST_TASK = {
    "key": "s3",
    "objective": "Make auth_spec.rb pass: the signed session token fails validation",
    "inputs": ["spec/auth_spec.rb", "app/models/session.rb"],
    "success_criteria": ["bundle exec rspec spec/auth_spec.rb exits 0"],
}


@dataclass(frozen=True)
class BenchWorld:
    project_id: str
    goals: tuple[Task, ...]
    tasks: tuple[Task, ...]
    """Every goal's tasks, running, goal by goal."""
    agent_key: str


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


def item_event(
    rng: random.Random, kind: str, goal_id: str, task_ids: list[str], counter: object, own_share: float
) -> DomainEvent:
    """One item of the goal: a task's own (one of ``task_ids``) with probability ``own_share``, always for
    failures, progress notes and tool calls; shared by the goal otherwise."""
    own = rng.random() < own_share or kind in ("failure", "progress", "tool_call")
    text = text_of(rng)
    common = {
        "item_id": str(uuid.uuid4()),
        "goal_id": goal_id,
        "task_id": (task_ids[0] if len(task_ids) == 1 else rng.choice(task_ids)) if own else None,
        "text": text,
        "trust_class": "untrusted_retrieved" if rng.random() < 0.05 else "repository_authored",
    }
    if kind == "fact":
        subject = rng.choice(VOCABULARY)
        rendered = render_fact(text, subject=subject, source="docs/notes.md")
        return FactRecorded(
            **common,
            token_counts=token_counts(rendered, [counter]),
            terms=list(item_terms(subject, text)),
            source="docs/notes.md",
            subject=subject,
            verified=rng.random() < 0.2,
        )
    if kind == "decision":
        rendered = render_decision(text, rationale="it keeps the spec green")
        return DecisionRecorded(
            **common,
            token_counts=token_counts(rendered, [counter]),
            terms=list(item_terms(text)),
            rationale="it keeps the spec green",
        )
    if kind == "failure":
        rendered = render_failure(text, attempt=1)
        return FailureRecorded(
            **common,
            token_counts=token_counts(rendered, [counter]),
            terms=list(item_terms(text)),
            attempt=1,
        )
    if kind == "artifact":
        uri = f"artifact://results/{rng.randrange(10**6)}"
        rendered = render_artifact(uri=uri, summary=text, excerpt="", media_type="text/plain")
        return ArtifactRecorded(
            **common,
            token_counts=token_counts(rendered, [counter]),
            terms=list(item_terms(text)),
            uri=uri,
            media_type="text/plain",
        )
    if kind == "progress":
        return ProgressRecorded(
            **common, token_counts=token_counts(text, [counter]), terms=list(item_terms(text))
        )
    digest = uuid.uuid4().hex * 2
    rendered = render_tool_call(tool="rspec", arguments_digest=digest, result_summary=text)
    return ToolCallRecorded(
        **common,
        token_counts=token_counts(rendered, [counter]),
        terms=list(item_terms(f"rspec {text}")),
        tool="rspec",
        arguments_digest=digest,
    )


def build_world(
    *, slug: str, size: int, goals: int = 1, tasks_per_goal: int = 1, own_share: float = 0.5, seed: int = 0
) -> BenchWorld:
    """A project with the default catalog, 20 tools, ``goals`` goals of ``size`` items each and
    ``tasks_per_goal`` running tasks per goal (the first like bench/compile.py's ``s3``), and an agent token.
    The tables are vacuumed and analyzed afterwards (as autovacuum soon would after such a load)."""
    rng = random.Random(seed or size)
    project = project_create(slug=slug, name=f"Bench {slug}", actor="bench")
    project_id = str(project.id)
    model_catalog_replace(
        project_id=project_id, catalog=json.loads(DEFAULT_CATALOG.read_text()), actor="bench"
    )
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
    goal_rows: list[Task] = []
    task_rows: list[Task] = []
    for goal_index in range(goals):
        specs = [FIRST_TASK] + [
            {"key": f"t{n:03d}", "objective": f"{sentence(rng, 8)} Fix the {rng.choice(DOMAIN)} handling."}
            for n in range(1, tasks_per_goal)
        ]
        goal = goal_create(
            project_id=project_id,
            objective="Fix the failing authentication spec" + (f" ({goal_index + 1})" if goal_index else ""),
            constraints=["Do not modify the database schema"],
            tasks=specs,
            actor="bench",
        )
        tasks = list(Task.objects.filter(goal_id=goal.id).exclude(id=goal.id).order_by("key"))
        for task in tasks:
            task_start(project_id=project_id, task_id=str(task.id), actor="bench")
        task_ids = [str(task.id) for task in tasks]
        for start in range(0, size, BATCH):
            events = [
                item_event(rng, rng.choice(kinds), str(goal.id), task_ids, counter, own_share)
                for _ in range(min(BATCH, size - start))
            ]
            store.append(
                stream_id=f"benchload-{project_id}-{goal_index}-{start}",
                events=events,
                expected_version=0,
                project_id=project_id,
                actor="bench",
            )
        goal_rows.append(Task.objects.get(id=goal.id))
        task_rows.extend(Task.objects.get(id=task.id) for task in tasks)
    key = agent_token_issue(project_id=project_id, name="bench", actor="bench").key
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
    return BenchWorld(project_id, tuple(goal_rows), tuple(task_rows), key)
