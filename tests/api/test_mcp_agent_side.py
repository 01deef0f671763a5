"""The whole agent side of the API over MCP (issue 29): an agent plans a goal, fails, retries and blocks its
task, verifies a fact, lists items and escalations, each tool the REST operation with its role checks."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from nexum.eventstore.models import Event
from tests.api.test_mcp import call_refused, session, structured, token

pytestmark = pytest.mark.django_db

PLAN = {
    "objective": "Fix the failing authentication spec",
    "tasks": [
        {"key": "s1", "objective": "Reproduce the failing spec"},
        {"key": "s2", "objective": "Make verify_token refuse expired tokens", "depends_on": ["s1"]},
    ],
}


def test_an_agent_plans_reports_and_lists_over_mcp(project, operator_api):
    agent = token(project)

    async def plan(client: Client) -> dict[str, Any]:
        goal = structured(await client.call_tool("create_goal", {**PLAN, "idempotency_key": "plan-1"}))
        again = structured(await client.call_tool("create_goal", {**PLAN, "idempotency_key": "plan-1"}))
        read = structured(await client.call_tool("get_goal", {"goal_id": goal["id"]}))
        return {"goal": goal, "again": again, "read": read}

    planned = session(agent, plan)
    goal = planned["goal"]
    assert planned["again"]["id"] == goal["id"]  # the same key wrote nothing more
    assert [task["key"] for task in planned["read"]["tasks"]] == ["s1", "s2"]
    assert goal["state"] == "pending" and len(goal["tasks"]) == 2
    s1 = next(task["id"] for task in goal["tasks"] if task["key"] == "s1")
    operator_api.put(
        f"/api/v1/tasks/{s1}/questions",
        {"questions": [{"question": "Which token lifetime?", "subjects": ["token lifetime"]}]},
        format="json",
    )

    async def work(client: Client) -> dict[str, Any]:
        structured(await client.call_tool("start_task", {"task_id": s1}))
        fact = structured(await client.call_tool("record_fact", {"task_id": s1, "text": "CI runs pytest"}))
        verified = structured(
            await client.call_tool("verify_fact", {"fact_id": fact["id"], "note": "ran it"})
        )
        history = structured(await client.call_tool("get_fact", {"fact_id": fact["id"]}))
        items = structured(
            await client.call_tool("list_items", {"task": s1, "kind": "fact", "current": True})
        )
        failed = structured(await client.call_tool("fail_task", {"task_id": s1, "reason": "flaky runner"}))
        retried = structured(await client.call_tool("start_task", {"task_id": s1}))
        resolved = structured(await client.call_tool("resolve_context", {"task_id": s1}))
        blocked = structured(
            await client.call_tool("block_task", {"task_id": s1, "reason": "the token lifetime is unknown"})
        )
        escalations = structured(await client.call_tool("list_escalations", {"task": s1, "state": "open"}))
        return locals()

    got = session(agent, work)
    assert got["verified"]["id"] == got["fact"]["id"] and got["verified"]["verified"] is True
    assert got["history"]["fact"]["verified"] is True and len(got["history"]["history"]) >= 2
    assert [item["id"] for item in got["items"]["results"]] == [got["fact"]["id"]]
    assert got["failed"]["state"] == "failed" and got["retried"]["attempt"] == 2
    assert got["blocked"]["state"] == "blocked"
    assert got["resolved"]["escalations"], got["resolved"]
    listed = got["escalations"]["results"]
    assert [escalation["id"] for escalation in listed] == [e["id"] for e in got["resolved"]["escalations"]]


def test_the_agent_side_tools_keep_the_apis_role_checks_and_refusals(project, operator_api):
    goal = operator_api.post("/api/v1/goals", PLAN, format="json").json()
    s1 = next(task["id"] for task in goal["tasks"] if task["key"] == "s1")
    rule = {"text": "Deploys need a second reviewer", "subject": "deploy window"}
    operators_fact = operator_api.post(f"/api/v1/tasks/{s1}/facts", rule, format="json").json()["id"]
    agent = token(project)
    before = Event.objects.count()

    refused = call_refused(agent, "verify_fact", {"fact_id": "no-such-fact"})
    assert refused.status == 404 and refused.error["code"] == "not_found"
    refused = call_refused(agent, "retract_fact", {"fact_id": operators_fact, "reason": "stale"})
    assert refused.status == 403 and refused.error["field"] == "trust_class"
    refused = call_refused(agent, "fail_task", {"task_id": s1, "reason": "not started"})
    assert refused.status == 409, refused
    contracts = {"s1": {"checks": []}}
    refused = call_refused(agent, "create_goal", {**PLAN, "contracts": contracts})
    assert refused.status == 400 and refused.error["field"] == "contracts" and "set_contract" in refused.text
    refused = call_refused(agent, "list_escalations", {"state": "pending"})
    assert refused.status == 400 and refused.error["field"] == "state"
    refused = call_refused(agent, "list_items", {"kind": "rumour"})
    assert refused.status == 400 and refused.error["field"] == "kind"
    assert Event.objects.count() == before
