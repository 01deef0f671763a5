"""Approvals over MCP (issue 28 item 4): an agent's start_task and request_completion are refused while an
approval is pending (the refusal names it), the agent cannot decide it (403), reads the answer with
get_approval once an operator decided, and then starts and completes."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from nexum.eventstore.models import Event
from tests.api.test_approvals_api import planned
from tests.api.test_mcp import call_refused, session, structured, token

pytestmark = pytest.mark.django_db


def test_an_approval_holds_start_and_completion_over_mcp_until_an_operator_grants(project, operator_api):
    task_id = planned(operator_api, approval="before_start")
    agent, operator = token(project), token(project, role="operator")

    refused = call_refused(agent, "start_task", {"task_id": task_id})
    assert refused.status == 409 and refused.error["code"] == "approval_required"
    approval_id = refused.error["details"]["approval_id"]
    before = Event.objects.count()
    decision = {"approval_id": approval_id, "decision": "grant", "reason": "mine"}
    forbidden = call_refused(agent, "decide_approval", decision)
    assert forbidden.status == 403 and forbidden.error["code"] == "forbidden"
    assert Event.objects.count() == before

    async def grant(client: Client) -> dict[str, Any]:
        return structured(
            await client.call_tool(
                "decide_approval", {"approval_id": approval_id, "decision": "grant", "reason": "window open"}
            )
        )

    assert session(operator, grant)["state"] == "granted"

    async def steps(client: Client) -> dict[str, Any]:
        answer = structured(await client.call_tool("get_approval", {"approval_id": approval_id}))
        started = structured(await client.call_tool("start_task", {"task_id": task_id}))
        completed = structured(
            await client.call_tool("request_completion", {"task_id": task_id, "answer": "ok"})
        )
        return {"answer": answer, "started": started, "completed": completed}

    got = session(agent, steps)
    assert got["answer"]["state"] == "granted" and got["answer"]["decision_reason"] == "window open"
    assert got["started"]["state"] == "running" and got["completed"]["outcome"] == "completed"


def test_a_completion_waits_over_mcp_and_the_agent_asks_again_after_a_denial(project, operator_api):
    task_id = planned(operator_api, approval="before_complete")
    agent = token(project)

    async def start(client: Client) -> dict[str, Any]:
        return structured(await client.call_tool("start_task", {"task_id": task_id}))

    assert session(agent, start)["state"] == "running"
    refused = call_refused(agent, "request_completion", {"task_id": task_id, "answer": "ok"})
    assert refused.status == 409 and refused.error["code"] == "approval_required"
    operator_api.post(
        f"/api/v1/approvals/{refused.error['details']['approval_id']}/decision",
        {"decision": "deny", "reason": "tests are red"},
        format="json",
    )
    denied = call_refused(agent, "request_completion", {"task_id": task_id, "answer": "ok"})
    assert denied.error["code"] == "approval_denied" and denied.error["details"]["reason"] == "tests are red"

    async def ask(client: Client) -> dict[str, Any]:
        return structured(
            await client.call_tool(
                "request_approval",
                {"task_id": task_id, "action": "complete", "reason": "tests are green now"},
            )
        )

    asked = session(agent, ask)
    assert asked["state"] == "pending" and asked["action"] == "complete"
    waiting = call_refused(agent, "request_completion", {"task_id": task_id, "answer": "ok"})
    assert waiting.error["details"]["approval_id"] == asked["id"]
