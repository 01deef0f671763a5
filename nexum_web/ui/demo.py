"""The demo world ``make run`` loads: the "Fix the failing authentication spec" goal with its plan, world
state, sources (one untrusted, with an injected instruction), grants, a real command check over the bundled
example repository, compiled contexts and open escalations — everything through the services, so each piece
is an event like any other.

The writes are made as the demo's two token holders would make them through the API: the operator
(``operator:demo-operator``) sets the policy — catalog, overlays, tools and their narrowing, the plan's
contracts, sources, grants and required questions — and the agent (``agent:demo-agent``) records what it saw
and did, at most ``agent_reported``, starts tasks, asks the gate, resolves and compiles.

Idempotent: every phase checks what is already there first, so a second run writes nothing.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from context_app.catalog.models import CatalogCard, ModelOverlay
from context_app.catalog.services import DEFAULT_CATALOG, model_catalog_replace, model_overlay_set
from context_app.compilation.models import ContextUsage, StoredContext
from context_app.compilation.services.compiles import context_compile
from context_app.compilation.services.usage import context_usage_report
from context_app.resolution.models import Grant, Source, TaskContext, TaskQuestions
from context_app.resolution.services.grants import grant_issue
from context_app.resolution.services.questions import questions_set
from context_app.resolution.services.resolve_requests import bundle_resolve_request
from context_app.resolution.services.resolves import bundle_resolve
from context_app.resolution.services.sources import source_register
from context_app.world.models import Tool, ToolScope, WorldItem
from context_app.world.services.facts import fact_record, fact_verify
from context_app.world.services.records import (
    artifact_record,
    decision_record,
    failure_record,
    progress_record,
    tool_call_record,
)
from context_app.world.services.scopes import scope_resolve
from context_app.world.services.tools import tool_define, tool_scope_set
from nexum.adapters.workspaces import project_published, project_workspace
from nexum.core import roles
from nexum.core.roles import actor_of, caller_trust
from nexum.eventstore.verification import verify_log
from tasks_app.models import Project, Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start
from tasks_app.services.projects import project_create
from verification_app.models import CompletionRequest
from verification_app.runner import workspace_folder
from verification_app.services.completion_runs import completion_run
from verification_app.services.completions import completion_request

ACTOR = "demo:loader"
AGENT_NAME = "demo-agent"
OPERATOR_NAME = "demo-operator"
AGENT = actor_of(roles.AGENT, AGENT_NAME)
OPERATOR = actor_of(roles.OPERATOR, OPERATOR_NAME)
AGENT_TRUST = caller_trust(None, role=roles.AGENT).name
PROJECT_SLUG = "demo"
GOAL_OBJECTIVE = "Fix the failing authentication spec"
EXAMPLES_DIR = Path(settings.BASE_DIR) / "examples"
WORKSPACE_FOLDER = "auth-service"

TOOLS = [
    (
        "run_tests",
        "Run the auth-service test suite with pytest",
        {"path": "string", "keyword": "string"},
        True,
    ),
    ("read_file", "Read a file of the auth-service repository", {"path": "string"}, False),
    (
        "edit_file",
        "Replace a range of lines in a repository file",
        {"path": "string", "patch": "string"},
        False,
    ),
    ("git_diff", "Show the working tree's diff against HEAD", {"path": "string"}, False),
    ("search_code", "Search the repository for a regular expression", {"pattern": "string"}, False),
]


@dataclass(frozen=True)
class DemoWorld:
    project: Project
    goal: Task
    tasks: dict[str, Task]


def pytest_check() -> dict[str, object]:
    """The real command check: the example's pytest suite, run in its copy in the project's workspace."""
    return {
        "kind": "command",
        "name": "auth-service pytest",
        "argv": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        "cwd": WORKSPACE_FOLDER,
        "timeout_s": 120,
    }


def load_demo_world(*, log: Callable[[str], None] = lambda line: None) -> DemoWorld:
    project = Project.objects.filter(slug=PROJECT_SLUG).first() or project_create(
        slug=PROJECT_SLUG, name="Demo", description="A demo world for trying Nexum", actor=ACTOR
    )
    project_id = str(project.id)
    _catalog(project_id, log)
    _tools(project_id, log)
    _workspace(project_id, log)
    _published(log)
    goal = _goal(project_id, log)
    tasks = {task.key: task for task in Task.objects.filter(goal_id=goal.id, is_goal=False)}
    _world_items(project_id, goal, tasks, log)
    _sources_and_grants(project_id, goal, tasks, log)
    _tool_scope(project_id, tasks, log)
    _run_gate(project_id, tasks, log)
    _resolve(project_id, tasks, log)
    _compile(project_id, tasks, log)
    _usage(project_id, log)
    _verify_log(log)
    tasks = {task.key: task for task in Task.objects.filter(goal_id=goal.id, is_goal=False)}
    return DemoWorld(project=project, goal=goal, tasks=tasks)


def _catalog(project_id: str, log: Callable[[str], None]) -> None:
    if not CatalogCard.objects.filter(project_id=project_id).exists():
        model_catalog_replace(
            project_id=project_id, catalog=json.loads(DEFAULT_CATALOG.read_text()), actor=OPERATOR
        )
        log("model catalog: quick, local, local-70b, frontier (tier words best, cheap)")
    if not ModelOverlay.objects.filter(project_id=project_id, word="local").exists():
        model_overlay_set(
            project_id=project_id,
            word="local",
            overlay={"context_tokens": 65536, "auto_compact_tokens": 24000, "enabled": True},
            actor=OPERATOR,
        )
        log("overlay: local lowered to a 64K window, compaction at 24K")
    if not ModelOverlay.objects.filter(project_id=project_id, word="cheap").exists():
        model_overlay_set(
            project_id=project_id, word="cheap", overlay={"auto_compact_tokens": 80}, actor=OPERATOR
        )
        log("overlay: cheap (the quick model) compacts a task's progress past 80 tokens")


def _tools(project_id: str, log: Callable[[str], None]) -> None:
    for name, description, properties, pinned in TOOLS:
        if Tool.objects.filter(project_id=project_id, name=name).exists():
            continue
        tool_define(
            project_id=project_id,
            name=name,
            description=description,
            schema={
                "type": "object",
                "properties": {key: {"type": kind} for key, kind in properties.items()},
                "required": sorted(properties)[:1],
            },
            pinned=pinned,
            actor=OPERATOR,
        )
        log(f"tool: {name}")


def _workspace(project_id: str, log: Callable[[str], None]) -> None:
    """A copy of the example repository inside the demo project's workspace folder, where the agent works
    and the command check runs. An existing copy is left alone: fix the bug there and ask the gate again
    (``workspace_reset`` puts the original back)."""
    target = workspace_folder(project_id) / WORKSPACE_FOLDER
    if target.exists():
        return
    _copy_example(target)
    log(f"workspace: copied examples/{WORKSPACE_FOLDER} to {target}")


def _published(log: Callable[[str], None]) -> None:
    """The operator's read-only copy of the example repository, in the demo project's published folder,
    which the ``auth-repo`` and ``auth-docs`` sources read: the agent cannot write there, so what it writes
    in its workspace never becomes repository content (SPEC R4a). An existing copy is left alone."""
    target = project_published(PROJECT_SLUG) / WORKSPACE_FOLDER
    if target.exists():
        return
    _copy_example(target)
    log(f"published: copied examples/{WORKSPACE_FOLDER} to {target} (read by auth-repo and auth-docs)")


def workspace_reset() -> Path:
    """Put the demo's workspace copy and its published copy back as ``examples/`` has them (a fix made or
    published there is gone); returns the workspace copy."""
    for target in (
        project_published(PROJECT_SLUG) / WORKSPACE_FOLDER,
        project_workspace(PROJECT_SLUG) / WORKSPACE_FOLDER,
    ):
        if target.exists():
            shutil.rmtree(target)
        _copy_example(target)
    return project_workspace(PROJECT_SLUG) / WORKSPACE_FOLDER


def _copy_example(target: Path) -> None:
    shutil.copytree(
        EXAMPLES_DIR / WORKSPACE_FOLDER, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )


def _goal(project_id: str, log: Callable[[str], None]) -> Task:
    existing = Task.objects.filter(project_id=project_id, is_goal=True, objective=GOAL_OBJECTIVE).first()
    if existing is not None:
        return existing
    goal = goal_create(
        project_id=project_id,
        objective=GOAL_OBJECTIVE,
        inputs=["tests/test_tokens.py", "auth_service/tokens.py"],
        constraints=["Do not modify the database schema", "Keep the public token API unchanged"],
        success_criteria=["python -m pytest exits 0 in auth-service"],
        tasks=[
            {
                "key": "s1",
                "objective": "Reproduce the failing authentication spec",
                "inputs": ["tests/test_tokens.py"],
                "success_criteria": ["the failing test is identified"],
                "risk": "low",
            },
            {
                "key": "s2",
                "objective": "Confirm the token expiry policy",
                "inputs": ["token expiry"],
                "success_criteria": ["the expiry in minutes is settled"],
                "risk": "medium",
                "depends_on": ["s1"],
            },
            {
                "key": "s3",
                "objective": "Make verify_token refuse expired tokens",
                "inputs": ["auth_service/tokens.py", "tests/test_tokens.py"],
                "constraints": ["Keep the public token API unchanged"],
                "success_criteria": ["python -m pytest exits 0 in auth-service"],
                "risk": "medium",
                "depends_on": ["s1"],
            },
            {
                "key": "s4",
                "objective": "Deploy the fix to staging",
                "inputs": ["staging deploy window"],
                "success_criteria": ["the staging smoke test passes"],
                "risk": "high",
                "depends_on": ["s2", "s3"],
            },
        ],
        contracts={
            "s1": {
                "checks": [
                    {
                        "kind": "file_exists",
                        "name": "spec present",
                        "path": f"{WORKSPACE_FOLDER}/tests/test_tokens.py",
                    }
                ]
            },
            "s3": {"checks": [pytest_check()], "on_failure": "failed"},
            "s4": {"checks": [pytest_check()], "on_failure": "blocked"},
        },
        actor=OPERATOR,
        idempotency_key="demo-goal",
    )
    log(f"goal: {GOAL_OBJECTIVE} (s1..s4)")
    return goal


def _world_items(project_id: str, goal: Task, tasks: dict[str, Task], log: Callable[[str], None]) -> None:
    if WorldItem.objects.filter(project_id=project_id).exists():
        return
    goal_scope = scope_resolve(project_id=project_id, goal_id=str(goal.id))
    s3_scope = scope_resolve(project_id=project_id, task_id=str(tasks["s3"].id))
    signing = fact_record(
        scope=goal_scope,
        text="Tokens are signed with HMAC-SHA256 over subject and expiry",
        source="examples/auth-service/docs/auth.md",
        subject="token signing",
        trust_class=AGENT_TRUST,
        actor=AGENT,
    )
    fact_verify(project_id=project_id, fact_id=str(signing.id), note="read the code", actor=AGENT)
    fact_record(
        scope=goal_scope,
        text="Sessions live in Redis; the auth service never writes to the database schema",
        source="examples/auth-service/docs/auth.md",
        subject="session store",
        trust_class=AGENT_TRUST,
        actor=AGENT,
    )
    decision_record(
        scope=goal_scope,
        text="Keep tokens signed with HMAC; fix only the expiry check",
        rationale="the mobile app verifies signatures and must keep working",
        trust_class=AGENT_TRUST,
        actor=AGENT,
    )
    artifact_record(
        scope=goal_scope,
        uri="file://examples/auth-service/tests/test_tokens.py",
        summary="the failing spec: test_an_expired_token_is_rejected",
        excerpt="verify_token(token, secret=SECRET, now=2_000) must raise InvalidToken",
        media_type="text/x-python",
        content=(EXAMPLES_DIR / WORKSPACE_FOLDER / "tests" / "test_tokens.py").read_bytes(),
        trust_class=AGENT_TRUST,
        actor=AGENT,
    )
    for note in (
        "Read auth_service/tokens.py: verify_token parses the expiry but never compares it with now",
        "Ran the suite: 2 passed, 1 failed (test_an_expired_token_is_rejected)",
        "Tried comparing the expiry as a string; the spec still fails",
    ):
        progress_record(scope=s3_scope, text=note, trust_class=AGENT_TRUST, actor=AGENT)
    tool_call_record(
        scope=s3_scope,
        tool="run_tests",
        arguments={"path": "tests/test_tokens.py"},
        result_summary="1 failed, 2 passed: test_an_expired_token_is_rejected did not raise InvalidToken",
        trust_class=AGENT_TRUST,
        actor=AGENT,
    )
    log("world state: facts, a decision, an artifact, progress notes and a tool call")


def _sources_and_grants(
    project_id: str, goal: Task, tasks: dict[str, Task], log: Callable[[str], None]
) -> None:
    published = project_published(PROJECT_SLUG) / WORKSPACE_FOLDER
    sources = {
        # The operator's published copy, not the workspace the agent writes and the gate checks: a source
        # over the workspace would be the agent's, its items at most agent_reported (SPEC R4a).
        "auth-repo": ("folder", {"path": str(published / "auth_service")}),
        "auth-docs": ("docs", {"path": str(published / "docs")}),
        "tickets": (
            "tickets_json",
            {
                "path": str(EXAMPLES_DIR / "tickets" / "auth-tickets.json"),
                "highest_trust": "untrusted_retrieved",
                "ttl_seconds": 30 * 24 * 3600,
            },
        ),
        # Registered but never granted: every resolve records the denial.
        "incident-feed": (
            "tickets_json",
            {
                "path": str(EXAMPLES_DIR / "tickets" / "incidents.json"),
                "highest_trust": "untrusted_retrieved",
            },
        ),
    }
    for name, (kind, config) in sources.items():
        if not Source.objects.filter(project_id=project_id, name=name).exists():
            source_register(project_id=project_id, name=name, kind=kind, config=config, actor=OPERATOR)
            log(f"source: {name} ({kind})")
    if not Grant.objects.filter(project_id=project_id, goal_id=goal.id).exists():
        grant_issue(
            project_id=project_id,
            goal_id=str(goal.id),
            sources={"auth-repo": ["*"], "auth-docs": ["*"], "tickets": ["*"]},
            reason="the auth fix may read the repository, its docs and the ticket export",
            actor=OPERATOR,
        )
        log("grant: auth-repo, auth-docs and tickets for the goal (incident-feed is not granted)")
    questions = {
        "s2": [{"question": "How long do access tokens live?", "subjects": ["Token expiry"]}],
        "s4": [{"question": "When is the staging deploy window?", "subjects": ["Staging deploy window"]}],
    }
    for key, asked in questions.items():
        if not TaskQuestions.objects.filter(task_id=tasks[key].id).exists():
            questions_set(project_id=project_id, task_id=str(tasks[key].id), questions=asked, actor=OPERATOR)


def _tool_scope(project_id: str, tasks: dict[str, Task], log: Callable[[str], None]) -> None:
    """s2 only reads: it may use the read tools, with search_code pinned."""
    if ToolScope.objects.filter(project_id=project_id, task_id=tasks["s2"].id).exists():
        return
    tool_scope_set(
        scope=scope_resolve(project_id=project_id, task_id=str(tasks["s2"].id)),
        allowed=["read_file", "search_code"],
        pinned=["search_code"],
        actor=OPERATOR,
    )
    log("tool scope: s2 may only read_file and search_code")


def _run_gate(project_id: str, tasks: dict[str, Task], log: Callable[[str], None]) -> None:
    """s1 completes through its file check; s3's attempt is refused by the real pytest run."""
    for key, answer in (
        ("s1", "Reproduced: test_an_expired_token_is_rejected fails"),
        ("s3", "Fixed, all tests pass"),
    ):
        task = Task.objects.get(id=tasks[key].id)
        if CompletionRequest.objects.filter(task_id=task.id).exists():
            continue
        if task.state == "pending":
            task = task_start(project_id=project_id, task_id=str(task.id), actor=AGENT)
        result = completion_request(project_id=project_id, task_id=str(task.id), answer=answer, actor=AGENT)
        if result.request is not None and not CompletionRequest.objects.get(id=result.request.id).decided:
            completion_run(request_id=str(result.request.id))  # a broker is configured: decide here
        decided = CompletionRequest.objects.get(task_id=task.id)
        log(f"gate: {key} {decided.outcome} ({decided.reason or 'all checks passed'})")
        if key == "s3" and decided.outcome == "failed":
            failure_record(
                scope=scope_resolve(project_id=project_id, task_id=str(task.id)),
                text=f"The gate refused the completion: {decided.reason}; the expired token still verifies",
                trust_class=AGENT_TRUST,
                actor=AGENT,
            )


def _resolve(project_id: str, tasks: dict[str, Task], log: Callable[[str], None]) -> None:
    """s2 and s3 resolved here; s4's resolve queued for a worker, as ``async: true`` does (in process, with no
    broker, it runs at once)."""
    for key in ("s2", "s3"):
        if TaskContext.objects.filter(task_id=tasks[key].id).exists():
            continue
        outcome = bundle_resolve(project_id=project_id, task_id=str(tasks[key].id), actor=AGENT)
        log(
            f"resolve: {key} complete={outcome.resolve.complete} stop={outcome.resolve.stop_reason} "
            f"escalations={len(outcome.bundle.get('escalations', []))}"
        )
    queued = bundle_resolve_request(
        project_id=project_id, task_id=str(tasks["s4"].id), request_id="demo-s4-resolve", actor=AGENT
    )
    log(f"resolve: s4 queued for a worker ({queued.status})")


def _compile(project_id: str, tasks: dict[str, Task], log: Callable[[str], None]) -> None:
    if StoredContext.objects.filter(project_id=project_id).exists():
        return
    plan = [
        ("s3", "quick", {"context_tokens": 1024}),
        ("s3", "frontier", None),
        ("s2", "local", None),
        ("s3", "cheap", None),  # past the cheap overlay's auto_compact_tokens: the oldest notes are folded
    ]
    for key, word, overrides in plan:
        outcome = context_compile(
            project_id=project_id,
            task_id=str(tasks[key].id),
            model_word=word,
            overrides=overrides,
            actor=AGENT,
        )
        log(
            f"compile: {key} for {word}: {outcome.context.total_tokens} tokens, "
            f"{outcome.context.excluded_count} excluded"
        )


def _usage(project_id: str, log: Callable[[str], None]) -> None:
    """What a provider counted for a call made with the frontier context: the usage ledger's first row, and
    the card's drift on GET /models and the admin (2 % more than Nexum counted: the chat template)."""
    if ContextUsage.objects.filter(project_id=project_id).exists():
        return
    context = StoredContext.objects.filter(project_id=project_id, model_word="frontier").first()
    if context is None:
        return
    counted = context.total_tokens + context.total_tokens // 50
    context_usage_report(
        project_id=project_id,
        digest=context.digest,
        prompt_tokens=counted,
        completion_tokens=180,
        provider="demo-provider",
        model="frontier",
        actor=AGENT,
    )
    log(
        f"usage: the provider counted {counted} prompt tokens for the frontier context"
        f" ({context.total_tokens} by Nexum)"
    )


def _verify_log(log: Callable[[str], None]) -> None:
    """Walk the log's hash chains, as ``nexum_verify_log`` does, so the dashboard shows a verification."""
    verification = verify_log()
    log(f"log: {verification.events} events verified" if verification.ok else f"log: {verification.message}")
