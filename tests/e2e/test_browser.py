"""Operators and humans in a real browser (SPEC I4, I5): the admin shows a compiled context's exclusions with
their reasons, a human settles a conflict in the escalation UI and the task can start, a human approves a
held start in the approvals page (issue 28 item 4), and the event log cannot be edited from the admin."""

from __future__ import annotations

import re

import pytest

from context_app.compilation.models import StoredContext
from context_app.resolution.models import Escalation
from context_app.resolution.selectors import plan_gate_guard
from nexum.core.resolution.escalations import PlanGateClosed
from nexum.core.verification.approvals import ApprovalRequired
from nexum.eventstore.models import Event
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start
from tasks_app.services.tokens import agent_token_issue
from tests.e2e.conftest import log_in, screenshot
from verification_app.models import Approval

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_an_operator_opens_a_compiled_context_and_sees_its_exclusions_with_reasons(
    live_server, page, demo_world, staff_user
):
    squeezed = StoredContext.objects.filter(excluded_count__gt=0).order_by("position").first()
    assert squeezed is not None, "the demo compiles one context under a small budget"
    log_in(page, live_server.url)
    assert page.locator("#nexum-dashboard").get_by_text("Recent compiles").is_visible()

    page.goto(f"{live_server.url}/admin/compilation/storedcontext/")
    page.get_by_role("link", name=squeezed.digest[:16]).click()

    page.wait_for_selector("pre.nx-prompt")
    assert squeezed.digest in page.locator("h2", has_text="Compiled context").inner_text()
    excluded = page.locator("h3", has_text="Excluded")
    assert f"Excluded ({squeezed.excluded_count}" in excluded.inner_text()
    by_reason = re.findall(r"(\w+) (\d+)", page.locator("h3:has-text('Excluded') + p").inner_text())
    assert sum(int(count) for _, count in by_reason) == squeezed.excluded_count
    rows = page.locator("xpath=//h3[starts-with(., 'Excluded')]/following-sibling::table[1]//tr")
    assert rows.count() == squeezed.excluded_count + 1
    assert re.search(r"needed \d+ tokens, \d+ left", rows.nth(1).inner_text())
    assert page.locator(".nx-bar-row").count() >= 4  # tokens per section against the budget
    assert page.get_by_role("link", name=re.compile("Replay at position")).is_visible()
    screenshot(page, "admin-compiled-context.png")


def test_a_human_settles_a_conflict_in_the_escalation_ui_and_the_task_can_start(
    live_server, page, demo_world, staff_user
):
    task = demo_world.tasks["s2"]
    conflict = Escalation.objects.get(task_id=task.id, kind="conflict", state="open")
    with pytest.raises(PlanGateClosed):
        plan_gate_guard(project_id=str(task.project_id), task_id=str(task.id))
    log_in(page, live_server.url)

    page.goto(f"{live_server.url}/escalations/")
    assert page.locator(".gap").count() == Escalation.objects.filter(state="open").count()
    page.get_by_role("link", name=conflict.missing).click()
    assert "closed" in page.get_attribute("#plan-gate", "class")
    sides = page.locator(".side")
    assert sides.count() == 2
    assert sides.filter(has_text="untrusted_retrieved").filter(has_text="60 minutes").count() == 1
    docs_side = sides.filter(has_text="auth-docs:")
    assert "15 minutes" in docs_side.inner_text()
    screenshot(page, "escalation-conflict.png")

    docs_side.locator("input[name='pick_side-reason']").fill("the docs are the policy")
    docs_side.get_by_role("button", name="Keep this side").click()

    page.wait_for_selector(".notice.success")
    assert "can start" in page.inner_text(".notice.success")
    assert page.inner_text("#escalation-state") == "resolved"
    assert "open" in page.get_attribute("#plan-gate", "class")
    assert page.locator(".side.rejected").filter(has_text="tickets:").count() == 1

    conflict.refresh_from_db()
    assert (conflict.state, conflict.resolution, conflict.resolved_by) == (
        "resolved",
        "pick_side",
        "human:operator",
    )
    assert conflict.resolution_reason == "the docs are the policy"
    plan_gate_guard(project_id=str(task.project_id), task_id=str(task.id))
    started = task_start(project_id=str(task.project_id), task_id=str(task.id), actor="agent:demo-agent")
    assert started.state == "running"
    page.goto(f"{live_server.url}/escalations/?state=resolved")
    assert page.locator(f".gap[data-escalation='{conflict.id}']").count() == 1


def test_an_event_cannot_be_edited_from_the_admin(live_server, page, demo_world, staff_user):
    event = Event.objects.filter(event_type="TaskStarted").order_by("position").first()
    before = (event.stream_id, event.version, event.event_type, event.data, event.metadata)
    log_in(page, live_server.url)

    page.goto(f"{live_server.url}/admin/eventstore/event/?q={event.stream_id}")
    assert page.locator("#result_list tbody tr").count() >= 1
    assert (
        page.locator(".object-tools a.addlink").count() == 0
        and page.locator("select[name=action]").count() == 0
    )
    change_url = f"{live_server.url}/admin/eventstore/event/{event.position}/change/"
    page.goto(change_url)
    assert page.locator("form#event_form input:not([type=hidden]), form#event_form textarea").count() == 0
    assert page.locator("input[name=_save], input[name=_continue], a.deletelink").count() == 0

    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        change_url,
        form={"csrfmiddlewaretoken": token, "event_type": "TaskCompleted", "data": "{}", "_save": "Save"},
        headers={"X-CSRFToken": token, "Referer": change_url},
    )
    assert response.status == 403 and "CSRF" not in response.text()
    assert (
        page.request.post(
            f"{change_url[: -len('change/')]}delete/",
            form={"csrfmiddlewaretoken": token, "post": "yes"},
            headers={"Referer": change_url},
        ).status
        == 403
    )

    event.refresh_from_db()
    assert (event.stream_id, event.version, event.event_type, event.data, event.metadata) == before
    assert Task.objects.filter(state="completed").count() == 1  # s1, through its gate only


def test_a_human_approves_a_held_start_in_the_approvals_page_and_the_task_starts(
    live_server, page, project, staff_user
):
    """An approval-required task cannot start; an agent's token cannot decide in the UI (403 without a staff
    session, the page sends it to the staff login, nothing is written); a staff member approves with a
    reason, and the start goes through."""
    goal = goal_create(
        project_id=str(project.id),
        objective="Release",
        tasks=[{"key": "deploy", "objective": "Deploy build 41", "risk": "high"}],
        contracts={"deploy": {"checks": [], "require_checks": False, "approval": "before_start"}},
        actor="operator:o",
    )
    task = Task.objects.get(goal_id=goal.id, key="deploy")
    with pytest.raises(ApprovalRequired) as held:
        task_start(project_id=str(project.id), task_id=str(task.id), actor="agent:a")
    approval_id = held.value.details["approval_id"]

    agent_key = agent_token_issue(project_id=str(project.id), name="browser-agent", actor="test").key
    decide_url = f"{live_server.url}/escalations/approvals/{approval_id}/decide"
    as_agent = page.request.post(
        decide_url,
        form={"decision": "grant", "reason": "I approve myself"},
        headers={"Authorization": f"Bearer {agent_key}"},
        max_redirects=0,
    )
    assert as_agent.status == 403  # no staff session: refused before any view runs
    page_as_agent = page.request.get(
        f"{live_server.url}/escalations/approvals/",
        headers={"Authorization": f"Bearer {agent_key}"},
        max_redirects=0,
    )
    assert page_as_agent.status == 302 and "/admin/login/" in page_as_agent.headers["location"]
    assert Approval.objects.get(id=approval_id).state == "pending"
    assert not Event.objects.filter(event_type__in=["ApprovalGranted", "ApprovalDenied"]).exists()

    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/escalations/approvals/")
    row = page.locator(f".approval[data-approval='{approval_id}']")
    assert "start" in row.inner_text() and "deploy" in row.inner_text() and "risk high" in row.inner_text()
    screenshot(page, "approvals-pending.png")
    row.locator("input[name='reason']").fill("change window is open")
    row.get_by_role("button", name="Approve").click()

    page.wait_for_selector(".notice.success")
    assert "start granted" in page.inner_text(".notice.success")
    assert page.locator(f".approval[data-approval='{approval_id}']").count() == 0  # no longer pending
    approval = Approval.objects.get(id=approval_id)
    assert (approval.state, approval.decided_by, approval.decision_reason) == (
        "granted",
        "human:operator",
        "change window is open",
    )
    started = task_start(project_id=str(project.id), task_id=str(task.id), actor="agent:a")
    assert started.state == "running"
    page.goto(f"{live_server.url}/escalations/approvals/?state=decided")
    assert "change window is open" in page.locator(f".approval[data-approval='{approval_id}']").inner_text()
