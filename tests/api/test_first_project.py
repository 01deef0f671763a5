"""README "Your first project", end to end from an empty database (on PostgreSQL in CI): a project and its two
tokens by command, a contract registered by the operator, and the agent's work over HTTP up to the gate's
``completed``. The same steps as the README's curl session."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from nexum.eventstore.models import Event
from tasks_app.models import AgentToken, Project

pytestmark = pytest.mark.django_db

CONTRACT = {
    "checks": [
        {"kind": "file_exists", "name": "report written", "path": "report.md"},
        {
            "kind": "file_matches",
            "name": "report has a result",
            "path": "report.md",
            "pattern": "(?m)^## Result",
        },
    ]
}


def issue(project: str, name: str, role: str) -> str:
    """``nexum_token issue``'s standard output: the key and nothing else."""
    out = io.StringIO()
    call_command("nexum_token", "issue", project, name, "--role", role, stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()


def bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_from_an_empty_database_to_a_completed_task(workspace):
    assert not Event.objects.exists() and not Project.objects.exists(), connection.vendor

    call_command("nexum_project", "create", "acme", "--name", "Acme", stdout=io.StringIO())
    operator = bearer(issue("acme", "planner", "operator"))
    agent = bearer(issue("acme", "coder", "agent"))
    for token in AgentToken.objects.all():  # stored hashed: the row holds the sha256 and a prefix only
        assert len(token.key_sha256) == 64 and len(token.key_prefix) == 8

    goal = operator.post(
        "/api/v1/goals",
        {
            "objective": "Write the release report",
            "tasks": [{"key": "report", "objective": "Write report.md"}],
        },
        format="json",
    )
    assert goal.status_code == 201, goal.content
    task_id = goal.json()["tasks"][0]["id"]
    contract = operator.put(f"/api/v1/tasks/{task_id}/contract", {"contract": CONTRACT}, format="json")
    assert contract.status_code == 200, contract.content
    assert contract.json()["actor"] == "operator:planner"
    refused = agent.put(f"/api/v1/tasks/{task_id}/contract", {"contract": {"checks": []}}, format="json")
    assert refused.status_code == 403  # the agent never sets its own bar

    fact = agent.post(
        f"/api/v1/tasks/{task_id}/facts",
        {"text": "The release is version 2.4.0", "verified": True},
        format="json",
    )
    assert fact.status_code == 201, fact.content
    assert fact.json()["trust_class"] == "agent_reported"
    assert agent.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").status_code == 200
    compiled = agent.post(f"/api/v1/tasks/{task_id}/compile", {"model": "quick"}, format="json")
    assert compiled.status_code == 200, compiled.content  # the default catalog came with the project
    context = compiled.json()["context"]
    assert "The release is version 2.4.0" in context["prompt_block"]
    assert context["budget"]["context_tokens"] == 8000

    early = agent.post(f"/api/v1/tasks/{task_id}/complete", {"answer": "done"}, format="json").json()
    assert (
        early["outcome"] == "failed" and "report written" in early["reason"]
    )  # the checks decide, not the answer
    assert agent.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").status_code == 200
    (workspace / "acme").mkdir(exist_ok=True)
    (workspace / "acme" / "report.md").write_text("# Release 2.4.0\n\n## Result\n\nShipped.\n")
    done = agent.post(f"/api/v1/tasks/{task_id}/complete", {"answer": "report written"}, format="json")
    assert done.status_code == 200, done.content
    assert done.json()["outcome"] == "completed" and done.json()["task"]["state"] == "completed"

    actors = set(Event.objects.values_list("metadata__actor", flat=True))
    assert {"command:nexum_project", "command:nexum_token", "operator:planner", "agent:coder"} <= actors


def test_a_key_is_printed_once_and_stored_as_its_sha256_only(project):
    out, err = io.StringIO(), io.StringIO()
    call_command("nexum_token", "issue", "acme", "ci-bot", "--role", "agent", stdout=out, stderr=err)
    key = out.getvalue().strip()
    assert out.getvalue() == key + "\n" and key.startswith("nx_") and len(key) > 40
    assert "shown once" in err.getvalue() and key not in err.getvalue()
    token = AgentToken.objects.get(name="ci-bot")
    assert token.key_sha256 == hashlib.sha256(key.encode()).hexdigest() and token.key_prefix == key[:8]
    with connection.cursor() as cursor:  # the rows as the database has them, every column
        cursor.execute(f"SELECT * FROM {AgentToken._meta.db_table}")
        rows = cursor.fetchall()
    assert len(rows) == 1 and not any(key in str(value) for value in rows[0])
    assert not any(key in str(data) for data in Event.objects.values_list("data", flat=True))
    listing = io.StringIO()
    call_command("nexum_token", "list", "acme", stdout=listing)
    assert "ci-bot" in listing.getvalue() and key[:8] in listing.getvalue() and key not in listing.getvalue()
    assert bearer(key).get("/api/v1/events").status_code == 200
