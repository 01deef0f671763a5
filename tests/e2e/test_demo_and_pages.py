"""The demo world and every page an operator or a human can open (SPEC I4, I5, Q1): the demo loads through
the services and a second load writes nothing; every admin changelist and one change page of each model, the
dashboard and the escalation UI answer 200 without an error; the UI's actions are events, need a staff
session and a CSRF token."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from context_app.resolution.models import BundleItem, Escalation, Grant
from context_app.world.models import WorldItem
from nexum.eventstore.models import Event
from tasks_app.models import AgentToken, Task
from tests.e2e.conftest import STAFF

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def staff_client(staff_user) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


def test_the_demo_world_has_every_feature_and_a_second_load_writes_nothing(demo_world):
    from nexum_web.ui.demo import load_demo_world

    tasks = demo_world.tasks
    assert {key: task.state for key, task in tasks.items()} == {
        "s1": "completed",
        "s2": "pending",
        "s3": "failed",
        "s4": "pending",
    }
    assert set(Escalation.objects.filter(state="open").values_list("kind", flat=True)) == {
        "conflict",
        "stale_only",
    }
    assert WorldItem.objects.filter(kind="failure", task_id=tasks["s3"].id).exists()
    assert Event.objects.filter(event_type="RetrievalDenied", data__source="incident-feed").exists()
    labels = [set(row) for row in BundleItem.objects.values_list("labels", flat=True)]
    assert any("suspected_instruction" in row for row in labels)  # the injected ticket, labelled as data
    assert any("stale" in row for row in labels)

    count = Event.objects.count()
    again = load_demo_world()
    assert Event.objects.count() == count
    assert {key: task.state for key, task in again.tasks.items()} == {k: t.state for k, t in tasks.items()}


def _one_object(model_admin: admin.ModelAdmin, request) -> object | None:  # type: ignore[no-untyped-def]
    return model_admin.get_queryset(request).first()


def test_every_admin_page_and_the_escalation_ui_answer_without_error(
    demo_settings, settings, staff_client, staff_user
):
    from django.core.management import call_command
    from django.test import RequestFactory

    settings.DEBUG = True  # nexum_demo (what `make run` calls) runs only in development
    printed = io.StringIO()
    call_command("nexum_demo", stdout=printed)
    assert settings.NEXUM_DEMO_TOKEN in printed.getvalue()
    assert settings.NEXUM_DEMO_OPERATOR_TOKEN in printed.getvalue()
    roles = dict(AgentToken.objects.filter(project__slug="demo").values_list("name", "role"))
    assert roles == {"demo-agent": "agent", "demo-operator": "operator"}

    # The demo has no webhook (it would need a receiver on the allowlist): one with a delivery recorded.
    from context_app.world.services.records import progress_record
    from context_app.world.services.scopes import scope_resolve
    from nexum_web.webhooks.services import deliveries_record, webhook_register

    settings.NEXUM_SOURCE_HTTP_ALLOW = ["127.0.0.1:9"]
    demo = AgentToken.objects.filter(project__slug="demo").first().project
    webhook_register(project_id=str(demo.id), url="http://127.0.0.1:9/hook", actor="admin:test")
    goal = demo.tasks.filter(is_goal=True).first()
    scope = scope_resolve(project_id=str(demo.id), goal_id=str(goal.id))
    progress_record(scope=scope, text="a note after the webhook", actor="agent:demo-agent")
    assert deliveries_record() == 1

    request = RequestFactory().get("/admin/")
    request.user = staff_user
    pages = [reverse("admin:index"), reverse("ui:escalations"), reverse("ui:escalations") + "?state=all"]
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        pages.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        obj = _one_object(model_admin, request)
        if obj is not None:
            pages.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk]))
        else:
            assert meta.label == "auth.Group", f"the demo has no {meta.label}"
    pages += [reverse("ui:escalation", args=[e.id]) for e in Escalation.objects.all()]
    from context_app.compilation.models import StoredContext

    contexts = list(StoredContext.objects.order_by("position"))
    pages.append(reverse("admin:compilation_storedcontext_replay", args=[contexts[0].pk]))
    pages.append(reverse("admin:compilation_storedcontext_diff", args=[contexts[0].pk, contexts[1].pk]))
    pages += [
        f"/admin/eventstore/event/?q={term}" for term in ("task-", "TaskStarted", "1", "nothing-like-it")
    ]

    for url in pages:
        response = staff_client.get(url)
        assert response.status_code == 200, url
        assert b"Traceback" not in response.content, url
    index = staff_client.get(reverse("admin:index")).content.decode()
    for heading in (
        "Open escalations",
        "Running, blocked and failed tasks",
        "Recent compiles",
        "Recent gate decisions",
    ):
        assert heading in index
    # staleness in human time: the stale ticket on its escalation page, the source's TTL in the admin
    stale = Escalation.objects.get(kind="stale_only")
    page = staff_client.get(reverse("ui:escalation", args=[stale.id])).content.decode()
    assert re.search(r"stale: observed \d+ (?:days?|years?) ago \(TTL 30 days\)", page)
    assert not re.search(r"\d+s ago", page)
    sources = staff_client.get(reverse("admin:resolution_source_changelist")).content.decode()
    assert "30 days" in sources


def test_the_escalation_ui_needs_a_staff_session_and_a_csrf_token(demo_world, staff_user):
    escalation = Escalation.objects.get(kind="stale_only")
    url = reverse("ui:escalation-resolve", args=[escalation.id])
    anonymous = Client()
    assert anonymous.get(reverse("ui:escalations")).status_code == 302
    assert anonymous.post(url, {"action": "cancel", "cancel-reason": "x"}).status_code == 302
    guarded = Client(enforce_csrf_checks=True)
    guarded.login(username=STAFF[0], password=STAFF[1])
    assert guarded.post(url, {"action": "cancel", "cancel-reason": "x"}).status_code == 403
    escalation.refresh_from_db()
    assert escalation.state == "open"
    assert Task.objects.get(id=escalation.task_id).state == "pending"


def test_supplying_a_fact_granting_a_source_and_cancelling_go_through_the_service(demo_world, staff_client):
    stale = Escalation.objects.get(kind="stale_only")
    url = reverse("ui:escalation-resolve", args=[stale.id])

    assert staff_client.post(url, {"action": "supply_fact", "supply_fact-text": ""}).status_code == 400
    assert staff_client.post(url, {"action": "explode"}).status_code == 400
    response = staff_client.post(
        url,
        {
            "action": "supply_fact",
            "supply_fact-text": "Staging deploys happen on Thursdays at 10:00 UTC.",
            "supply_fact-subject": "Staging deploy window",
            "supply_fact-reason": "asked the release manager",
        },
    )
    assert response.status_code == 302
    stale.refresh_from_db()
    assert (stale.state, stale.resolution, stale.resolved_by) == ("resolved", "supply_fact", "human:operator")
    fact = WorldItem.objects.get(id=stale.resolution_detail["fact_id"])
    assert (fact.verified, fact.source, fact.subject) == (True, "human:operator", "Staging deploy window")
    again = staff_client.post(url, {"action": "cancel", "cancel-reason": "late"})
    assert again.status_code == 409 and b"already resolved" in again.content

    conflict = Escalation.objects.get(kind="conflict")
    grants = Grant.objects.count()
    url = reverse("ui:escalation-resolve", args=[conflict.id])
    assert (
        staff_client.post(url, {"action": "grant_source", "grant_source-source": "nope"}).status_code == 400
    )
    response = staff_client.post(url, {"action": "grant_source", "grant_source-source": "incident-feed"})
    assert response.status_code == 302
    assert Grant.objects.count() == grants + 1
    conflict.refresh_from_db()
    assert conflict.resolution == "grant_source"

    page = staff_client.get(reverse("ui:escalation", args=[conflict.id]), follow=True).content.decode()
    assert "grant_source" in page

    s3 = demo_world.tasks["s3"]
    from context_app.resolution.services.resolves import bundle_resolve

    bundle_resolve(project_id=str(s3.project_id), task_id=str(s3.id), actor="agent:x")
    s4 = demo_world.tasks["s4"]
    assert not Escalation.objects.filter(task_id=s4.id, state="open").exists()
    assert Task.objects.get(id=s4.id).state == "pending"


def test_keeping_the_docs_side_for_s2_settles_the_expiry_conflict_for_s3_too(demo_world, staff_client):
    """The demo's conflict is escalated on s2 (its input); s3 sees the same two claims. Keeping the docs'
    side in the UI applies to both: s3's next compile no longer carries the ticket's "60 minutes"."""
    from context_app.compilation.services.compiles import context_compile

    s3 = demo_world.tasks["s3"]

    def s3_prompt() -> str:
        outcome = context_compile(
            project_id=str(s3.project_id), task_id=str(s3.id), model_word="frontier", actor="agent:x"
        )
        return outcome.context.prompt_block

    assert "60 minutes" in s3_prompt()
    conflict = Escalation.objects.get(kind="conflict")
    assert conflict.task_id == demo_world.tasks["s2"].id
    reach = (
        "applies to all 2 tasks of goal “Fix the failing authentication spec” that see this subject (s2, s3)"
    )
    assert reach in staff_client.get(reverse("ui:escalation", args=[conflict.id])).content.decode()

    docs = next(entry["digest"] for entry in conflict.evidence if entry["source"] == "auth-docs")
    response = staff_client.post(
        reverse("ui:escalation-resolve", args=[conflict.id]),
        {"action": "pick_side", "pick_side-chosen": docs, "pick_side-reason": "the docs are the spec"},
        follow=True,
    )
    assert response.status_code == 200
    assert f"The settlement {reach}." in response.content.decode()
    prompt = s3_prompt()
    assert "60 minutes" not in prompt and "15 minutes" in prompt


BUG = "    # BUG (the demo's failing spec): the expiry is never enforced.\n    del expiry\n"
FIX = '    if now >= expiry:\n        raise InvalidToken("expired")\n'


def test_the_fix_story_passes_the_gate_and_shows_the_fix_once_published_and_a_reset_restarts(
    demo_settings, settings
):
    """The README's story: fix tokens.py in the workspace copy, start s3 again and ask the gate (completed:
    the checks run on the workspace). The repository source reads the operator's published copy, which the
    agent cannot write, so s3's context still shows the code as published beside the passing check; once an
    operator publishes the fix, the next resolve and compile show it as repository content. ``nexum_demo
    --reset`` (``make demo-reset``) then gives the demo from its start: s3 failed, both copies restored."""
    from django.core.management import call_command

    from nexum.adapters.workspaces import project_published, project_workspace
    from nexum_web.ui.demo import EXAMPLES_DIR

    settings.DEBUG = True
    call_command("nexum_demo", stdout=io.StringIO())
    s3 = Task.objects.get(project__slug="demo", key="s3")
    assert s3.state == "failed"
    tokens = project_workspace("demo") / "auth-service" / "auth_service" / "tokens.py"
    published = project_published("demo") / "auth-service" / "auth_service" / "tokens.py"
    assert BUG in tokens.read_text() and BUG in published.read_text()
    tokens.write_text(tokens.read_text().replace(BUG, FIX))

    agent = Client(HTTP_AUTHORIZATION=f"Bearer {settings.NEXUM_DEMO_TOKEN}")

    def post(path: str, body: dict) -> dict:
        response = agent.post(f"/api/v1/tasks/{s3.id}/{path}", body, content_type="application/json")
        assert response.status_code == 200, response.content
        return response.json()

    post("resolve", {})
    assert post("start", {})["state"] == "running"
    assert post("complete", {"answer": "verify_token now refuses expired tokens"})["outcome"] == "completed"
    prompt = post("compile", {"model": "frontier"})["context"]["prompt_block"]
    assert "Check auth-service pytest: passed" in prompt
    assert "the expiry is never enforced" in prompt  # the published copy: the agent's fix is not in it
    assert 'raise InvalidToken("expired")' not in prompt

    published.write_text(tokens.read_text())  # the operator publishes the fix
    bundle = post("resolve", {})["bundle"]
    repo = [item for item in bundle["items"] if item["locator"].startswith("tokens.py")]
    assert repo and {item["trust_class"] for item in repo} == {"repository_authored"}
    prompt = post("compile", {"model": "frontier"})["context"]["prompt_block"]
    assert 'raise InvalidToken("expired")' in prompt
    assert "the expiry is never enforced" not in prompt

    printed = io.StringIO()
    call_command("nexum_demo", reset=True, stdout=printed)
    assert "restored from examples/" in printed.getvalue()
    original = (EXAMPLES_DIR / "auth-service" / "auth_service" / "tokens.py").read_text()
    assert tokens.read_text() == original and published.read_text() == original
    assert Task.objects.get(project__slug="demo", key="s3").state == "failed"
    assert "s3 failed" in printed.getvalue()
