"""The usage ledger (issue 28 item 3) end to end: an agent reports the provider's counts for a call made with
a compiled context; ``GET /models`` shows each card's p50/p95 drift against Nexum's count, ``GET /usage`` the
totals of the project, a goal and a task, the dashboard the cards past the threshold; refusals write
nothing; a card's safety margin is reserved in the budget, recorded by compiles, and replays still match."""

from __future__ import annotations

import copy
import json
from decimal import Decimal

import pytest

from context_app.catalog.services import DEFAULT_CATALOG
from context_app.compilation.models import ContextUsage
from nexum.eventstore.models import Event
from tests.api.test_mcp import refusal, session, structured, token
from tests.api.test_metrics_api import scrape, value
from tests.integration.compile_world import build_auth_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def auth(project):
    return build_auth_world(project, filler=3, tools=2)


def compiled(api, auth, model: str = "quick") -> dict:
    answer = api.post(f"/api/v1/tasks/{auth.task.id}/compile", {"model": model}, format="json")
    assert answer.status_code == 200, answer.json()
    return answer.json()["context"]


def report(api, digest: str, prompt_tokens: int, **fields):
    body = {"prompt_tokens": prompt_tokens, "completion_tokens": 40, "provider": "vllm", "model": "gemma"}
    return api.post(f"/api/v1/contexts/{digest}/usage", {**body, **fields}, format="json")


def word(api, name: str) -> dict:
    return next(entry for entry in api.get("/api/v1/models").json()["words"] if entry["word"] == name)


def test_drift_per_card_is_computed_from_the_recorded_usage(api, auth, settings):
    settings.NEXUM_USAGE_DRIFT_THRESHOLD = 0.05
    context = compiled(api, auth)
    nexum = context["total_tokens"]
    provider_counts = [nexum + 10, nexum - 4, nexum + 90, nexum + 30]
    for count in provider_counts:
        answer = report(api, context["digest"], count, cost=0.25)
        assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["nexum_tokens"] == nexum and body["card_word"] == "quick"
    assert body["actor"].startswith("agent:")
    assert body["drift"] == pytest.approx(30 / nexum)

    drifts = sorted((count - nexum) / nexum for count in provider_counts)  # [-4, 10, 30, 90] / nexum
    expected = {
        "reports": 4,
        "p50": drifts[1],  # nearest rank: ceil(0.50 * 4) = 2
        "p95": drifts[3],  # ceil(0.95 * 4) = 4
        "nexum_tokens": 4 * nexum,
        "provider_tokens": sum(provider_counts),
        "threshold": 0.05,
        "drifting": 90 / nexum > 0.05,
    }
    assert word(api, "quick")["drift"] == expected
    assert word(api, "cheap")["drift"] == expected  # a tier word naming the card shows the card's drift
    assert word(api, "local")["drift"] is None

    for query in ("", f"?task={auth.task.id}", f"?goal={auth.goal.id}"):
        summary = api.get(f"/api/v1/usage{query}").json()
        totals = {
            "reports": 4,
            "nexum_tokens": 4 * nexum,
            "prompt_tokens": sum(provider_counts),
            "completion_tokens": 160,
            "cost": 1.0,
            "costed_reports": 4,
        }
        assert summary["totals"] == totals
        assert summary["by_card"] == [{"card_word": "quick", "totals": totals}]
    assert api.get(f"/api/v1/usage?goal={auth.goal.id}").json()["scope"] == "goal"
    assert ContextUsage.objects.get(usage_id=body["usage_id"]).cost == Decimal("0.25")


def test_the_dashboard_and_the_admin_show_a_card_past_the_threshold(api, auth, admin_client, settings):
    settings.NEXUM_USAGE_DRIFT_THRESHOLD = 0.05
    context = compiled(api, auth)
    nexum = context["total_tokens"]
    report(api, context["digest"], nexum + nexum // 5)  # 20 % more than Nexum counted
    page = admin_client.get("/admin/").content.decode()
    assert 'id="nexum-drift"' in page and "quick" in page
    ledger = admin_client.get("/admin/compilation/contextusage/").content.decode()
    assert 'id="nexum-card-drift"' in ledger and "raise the card's safety margin" in ledger

    settings.NEXUM_USAGE_DRIFT_THRESHOLD = 0.5
    assert 'id="nexum-drift"' not in admin_client.get("/admin/").content.decode()
    assert word(api, "quick")["drift"]["drifting"] is False


def test_a_retry_with_the_same_key_records_once(api, auth):
    digest = compiled(api, auth)["digest"]
    headers = {"HTTP_IDEMPOTENCY_KEY": "call-1"}
    body = {"prompt_tokens": 500, "completion_tokens": 7, "provider": "openai", "model": "gpt-x"}
    first = api.post(f"/api/v1/contexts/{digest}/usage", body, format="json", **headers)
    again = api.post(f"/api/v1/contexts/{digest}/usage", body, format="json", **headers)
    assert first.status_code == again.status_code == 201 and first.json() == again.json()
    assert ContextUsage.objects.count() == 1
    changed = api.post(
        f"/api/v1/contexts/{digest}/usage", {**body, "prompt_tokens": 501}, format="json", **headers
    )
    assert changed.status_code == 409 and changed.json()["error"]["code"] == "idempotency_key_reused"


def test_an_operator_may_report_and_both_roles_read_the_totals(api, operator_api, auth):
    digest = compiled(api, auth)["digest"]
    answer = report(operator_api, digest, 100)
    assert answer.status_code == 201 and answer.json()["actor"].startswith("operator:")
    assert api.get("/api/v1/usage").json()["totals"]["reports"] == 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"prompt_tokens": -1}, "prompt_tokens"),
        ({"completion_tokens": -5}, "completion_tokens"),
        ({"cost": -0.01}, "cost"),
        ({"provider": "  "}, "provider"),
        ({"model": "x" * 201}, "model"),
        ({"prompt_tokens": "120"}, "prompt_tokens"),
        ({"cost": 1e13}, "cost"),
        ({"nexum_tokens": 3}, "nexum_tokens"),
    ],
)
def test_bad_numbers_and_names_are_400_naming_the_member_and_write_nothing(api, auth, fields, field):
    digest = compiled(api, auth)["digest"]
    events = Event.objects.count()
    answer = report(api, digest, **{"prompt_tokens": 100, **fields})
    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["field"] == field
    assert Event.objects.count() == events and not ContextUsage.objects.exists()


def test_unknown_and_other_projects_digests_are_404_and_write_nothing(api, other_api, auth):
    digest = compiled(api, auth)["digest"]
    events = Event.objects.count()
    for caller, target in ((api, "0" * 64), (api, "not-a-digest"), (other_api, digest)):
        answer = report(caller, target, 100)
        assert answer.status_code == 404 and answer.json()["error"]["field"] == "digest"
    assert Event.objects.count() == events


def test_usage_totals_refuse_an_unknown_or_other_projects_task_or_goal(api, other_api, auth):
    assert other_api.get(f"/api/v1/usage?task={auth.task.id}").status_code == 404
    assert api.get(f"/api/v1/usage?goal={auth.task.id}").json()["error"]["field"] == "goal"
    both = api.get(f"/api/v1/usage?goal={auth.goal.id}&task={auth.task.id}")
    assert both.status_code == 200 and both.json()["scope"] == "task"


def catalog_with(**members) -> dict:
    catalog = json.loads(DEFAULT_CATALOG.read_text())
    catalog = copy.deepcopy(catalog)
    catalog["cards"].append(
        {
            "word": "tight",
            "model_id": "local/tight-10k",
            "tier": "local",
            "context_window": 10_000,
            "max_output_tokens": 1_000,
            "preferred_context_tokens": 9_000,
            **members,
        }
    )
    return catalog


def test_a_cards_safety_margin_is_reserved_in_the_budget_and_recorded_by_compiles(api, operator_api, auth):
    before = compiled(api, auth)
    assert "safety_margin_tokens" not in before["budget"]  # a budget without margin keeps its old form

    put = operator_api.put("/api/v1/models/catalog", catalog_with(safety_margin_percent=10), format="json")
    assert put.status_code == 200, put.json()
    budget = word(api, "tight")["budget"]
    # window 10,000 - reserve 1,000 = 9,000 usable; 10 % of it (900) is held back: 8,100 of the 9,000 wanted
    assert (budget["context_tokens"], budget["safety_margin_tokens"]) == (8_100, 900)
    context = compiled(api, auth, "tight")
    assert context["budget"]["context_tokens"] == 8_100 and context["budget"]["safety_margin_tokens"] == 900
    assert context["total_tokens"] <= 8_100
    recorded = Event.objects.filter(event_type="ContextCompiled").order_by("-position").first()
    assert recorded.data["budget"]["safety_margin_tokens"] == 900  # the compile's event records the margin
    for digest in (context["digest"], before["digest"]):
        assert api.post(f"/api/v1/contexts/{digest}/replay").json()["matches"] is True

    tokens = operator_api.put("/api/v1/models/catalog", catalog_with(safety_margin_tokens=500), format="json")
    assert tokens.status_code == 200
    assert word(api, "tight")["budget"]["context_tokens"] == 8_500
    assert word(api, "quick")["budget"]["safety_margin_tokens"] == 0


@pytest.mark.parametrize(
    ("members", "field"),
    [
        ({"safety_margin_percent": 91}, "cards[3].safety_margin_percent"),
        ({"safety_margin_tokens": -1}, "cards[3].safety_margin_tokens"),
        ({"safety_margin_tokens": 10, "safety_margin_percent": 5}, "cards[3].safety_margin_percent"),
    ],
)
def test_a_bad_safety_margin_is_refused_naming_it(operator_api, auth, members, field):
    answer = operator_api.put("/api/v1/models/catalog", catalog_with(**members), format="json")
    assert answer.status_code == 400 and answer.json()["error"]["field"] == field


def test_an_agent_reports_usage_over_mcp_and_a_refusal_is_an_error_result(api, project, auth):
    context = compiled(api, auth)
    usage = {"completion_tokens": 12, "provider": "vllm", "model": "gemma"}

    async def steps(client):
        reported = structured(
            await client.call_tool(
                "report_usage", {"digest": context["digest"], "prompt_tokens": 1234, **usage, "cost": 0.5}
            )
        )
        negative = refusal(
            await client.call_tool(
                "report_usage", {"digest": context["digest"], "prompt_tokens": -1, **usage}
            )
        )
        unknown = refusal(
            await client.call_tool("report_usage", {"digest": "f" * 64, "prompt_tokens": 1, **usage})
        )
        return reported, negative, unknown

    reported, negative, unknown = session(token(project), steps)
    assert reported["drift"] == pytest.approx((1234 - context["total_tokens"]) / context["total_tokens"])
    assert reported["cost"] == 0.5 and reported["actor"].startswith("agent:")
    assert (negative.status, negative.error["field"]) == (400, "prompt_tokens")
    assert (unknown.status, unknown.error["field"]) == (404, "digest")
    assert ContextUsage.objects.count() == 1


def test_metrics_show_each_cards_drift_and_whether_it_is_past_threshold(api, operator_api, auth, settings):
    settings.NEXUM_USAGE_DRIFT_THRESHOLD = 0.05
    context = compiled(api, auth)
    nexum = context["total_tokens"]
    for count in (nexum + 10, nexum + nexum // 5):
        report(api, context["digest"], count)
    samples = scrape(operator_api)
    labels = {"project": auth.task.project.slug, "card": "quick"}
    assert value(samples, "nexum_card_prompt_drift", quantile="0.5", **labels) == pytest.approx(10 / nexum)
    assert value(samples, "nexum_card_prompt_drift", quantile="0.95", **labels) == pytest.approx(
        (nexum // 5) / nexum
    )
    assert value(samples, "nexum_card_drifting", **labels) == 1
    settings.NEXUM_USAGE_DRIFT_THRESHOLD = 0.5
    assert value(scrape(operator_api), "nexum_card_drifting", **labels) == 0
