"""The seed's worked example (the auth-spec step), built through the services, for the compile tests."""

from __future__ import annotations

import json
from dataclasses import dataclass

from context_app.catalog.services import DEFAULT_CATALOG, model_catalog_replace
from context_app.world.services.facts import fact_record, fact_verify
from context_app.world.services.records import (
    artifact_record,
    decision_record,
    failure_record,
    progress_record,
    tool_call_record,
)
from context_app.world.services.scopes import scope_resolve
from context_app.world.services.tools import tool_define
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start

FILLER = (
    "The session middleware refreshes the signed token on every request and writes the rotated value back "
    "to the cookie store, so a stale token read from the cache during the same request fails validation in "
    "the token check; this was observed in the staging logs of the auth service during the last deploy."
)


@dataclass
class AuthWorld:
    project_id: str
    goal: Task
    task: Task
    failure_id: str
    redis_fact_id: str
    artifact_id: str
    tool_call_id: str


def load_catalog(project_id: str) -> None:
    model_catalog_replace(
        project_id=project_id, catalog=json.loads(DEFAULT_CATALOG.read_text()), actor="test"
    )


def build_auth_world(project, *, filler: int = 100, tools: int = 16) -> AuthWorld:
    project_id = str(project.id)
    load_catalog(project_id)
    goal = goal_create(
        project_id=project_id,
        objective="Fix the failing authentication spec",
        constraints=["Do not modify the database schema"],
        tasks=[
            {
                "key": "s3",
                "objective": "Make auth_spec.rb pass",
                "inputs": ["spec/auth_spec.rb"],
                "constraints": ["Keep the public token API unchanged"],
                "success_criteria": ["bundle exec rspec spec/auth_spec.rb exits 0"],
            }
        ],
        actor="test",
    )
    task = Task.objects.get(goal_id=goal.id, key="s3")
    task_start(project_id=project_id, task_id=str(task.id), actor="test")
    goal_scope = scope_resolve(project_id=project_id, goal_id=str(goal.id))
    task_scope = scope_resolve(project_id=project_id, task_id=str(task.id))
    failure = failure_record(
        scope=task_scope, text="patched token check; spec still fails at line 48", actor="test"
    )
    redis = fact_record(
        scope=goal_scope, text="Redis is required", source="docs/arch.md", subject="redis", actor="test"
    )
    fact_verify(project_id=project_id, fact_id=str(redis.id), actor="test")
    artifact = artifact_record(
        scope=task_scope,
        uri="artifact://test-results/456",
        summary="37 passed, 2 failed",
        excerpt="auth_spec.rb:48",
        actor="test",
    )
    call = tool_call_record(
        scope=task_scope,
        tool="rspec",
        arguments={"path": "spec/auth_spec.rb"},
        result_summary="Failure/Error: expect(token).to be_valid (spec/auth_spec.rb:48)",
        actor="test",
    )
    decision_record(
        scope=goal_scope,
        text="Keep tokens signed with HMAC",
        rationale="the mobile app verifies them",
        actor="t",
    )
    for index in range(filler):
        fact_record(scope=goal_scope, text=f"Observation {index}: {FILLER}", subject="auth", actor="test")
        progress_record(scope=task_scope, text=f"Step {index}: {FILLER}", actor="test")
    for index in range(tools):
        tool_define(
            project_id=project_id,
            name=f"tool_{index:02d}",
            description=f"Tool number {index} for working on the auth spec and tokens",
            schema={
                "type": "object",
                "properties": {"path": {"type": "string"}, "line": {"type": "integer"}},
            },
            pinned=index == 0,
            actor="test",
        )
    return AuthWorld(
        project_id=project_id,
        goal=goal,
        task=Task.objects.get(id=task.id),
        failure_id=str(failure.id),
        redis_fact_id=str(redis.id),
        artifact_id=str(artifact.id),
        tool_call_id=str(call.id),
    )
