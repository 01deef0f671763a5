"""The compile endpoints (SPEC I1, C8, C10, C12) end to end: compile sync and queued, poll, read, replay,
diff; another project's ids are 404 with nothing written; bad input is 400 naming the field."""

from __future__ import annotations

import gzip
import json

import pytest

from context_app.compilation.models import StoredContext
from context_app.world.models import WorldItem
from nexum.eventstore.models import Event
from tests.integration.compile_world import build_auth_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def auth(project):
    return build_auth_world(project, filler=30)


def compile_url(auth) -> str:
    return f"/api/v1/tasks/{auth.task.id}/compile"


def test_compile_read_replay_and_diff(api, auth):
    small = api.post(compile_url(auth), {"model": "quick"}, format="json")
    assert small.status_code == 200, small.json()
    context = small.json()["context"]
    assert "Fix the failing authentication spec" in context["prompt_block"]
    assert context["budget"]["context_tokens"] == 8000
    assert "excluded" not in context and context["exclusions"]["count"] > 0
    frontier = api.post(
        compile_url(auth),
        {
            "model": "best",
            "overrides": {"tool_count": 3},
            "evidence": [{"kind": "diagnostic", "id": "lint", "text": "auth.rb:12 unused variable"}],
        },
        format="json",
    ).json()["context"]
    assert len(frontier["tools"]) == 3
    assert {"kind": "diagnostic", "id": "request:lint"} in frontier["included"]

    got = api.get(f"/api/v1/contexts/{context['digest']}")
    assert got.status_code == 200 and got.json() == context

    scope = WorldItem.objects.filter(task_id=auth.task.id).first()
    assert scope is not None
    api.post(f"/api/v1/tasks/{auth.task.id}/failures", {"text": "third try failed at line 52"}, format="json")
    for method in (api.post, api.get):
        replay = method(f"/api/v1/contexts/{context['digest']}/replay")
        assert replay.status_code == 200
        assert replay.json()["matches"] is True and replay.json()["replayed_digest"] == context["digest"]

    diff = api.get(f"/api/v1/contexts/{context['digest']}/diff/{frontier['digest']}").json()
    assert diff["entered"]
    assert all(entry["reason"] for entry in diff["entered"] if not entry["id"].startswith("request:"))
    assert {"kind": "diagnostic", "id": "request:lint", "reason": None} in diff["entered"]


def test_the_compile_answer_is_compact_and_the_full_list_is_paged(api, auth):
    """By default the answer summarizes what was left out (counts per reason, the runs without their ids);
    ``?excluded=full`` adds every record, and ``/contexts/{digest}/excluded`` pages through the same records
    in the one list shape. The digest does not depend on the view."""
    compact = api.post(compile_url(auth), {"model": "quick"}, format="json").json()["context"]
    digest = compact["digest"]
    full = api.get(f"/api/v1/contexts/{digest}?excluded=full").json()
    assert {key: value for key, value in full.items() if key != "excluded"} == compact
    summary = compact["exclusions"]
    assert summary["count"] == len(full["excluded"]) == sum(summary["by_reason"].values())
    assert sum(run["count"] for run in summary["runs"]) == summary["count"]
    assert all(record["reason"] for record in full["excluded"])
    reasons = {record["reason"] for record in full["excluded"]}
    assert ("token_budget" in summary["by_reason"]) == any(" left" in reason for reason in reasons)

    paged, cursor, pages = [], None, 0
    while True:
        query = "limit=7" + (f"&cursor={cursor}" if cursor else "")
        page = api.get(f"/api/v1/contexts/{digest}/excluded?{query}")
        assert page.status_code == 200 and set(page.json()) == {"results", "next_cursor"}
        paged.extend(page.json()["results"])
        pages += 1
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert paged == full["excluded"] and pages == -(-len(paged) // 7)
    assert api.get(f"/api/v1/contexts/{digest}/excluded").json()["results"] == full["excluded"][:50]

    again = api.post(compile_url(auth), {"model": "quick"}, format="json").json()["context"]
    assert again["digest"] == digest
    full_answer = api.post(f"{compile_url(auth)}?excluded=full", {"model": "quick"}, format="json").json()
    assert full_answer["context"]["excluded"] == full["excluded"]


@pytest.mark.parametrize(
    "path, field",
    [
        ("?excluded=all", "excluded"),
        ("/excluded?limit=0", "limit"),
        ("/excluded?limit=501", "limit"),
        ("/excluded?cursor=abc", "cursor"),
    ],
)
def test_bad_exclusion_parameters_name_the_field(api, auth, path, field):
    digest = api.post(compile_url(auth), {"model": "quick"}, format="json").json()["context"]["digest"]
    answer = api.get(f"/api/v1/contexts/{digest}{path}")
    assert answer.status_code == 400 and answer.json()["error"]["field"] == field


def test_async_compile_and_poll(api, auth, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        queued = api.post(compile_url(auth), {"model": "local", "async": True}, format="json")
    assert queued.status_code == 202, queued.json()
    request_id = queued.json()["request_id"]
    polled = api.get(f"/api/v1/compiles/{request_id}")
    assert polled.status_code == 200
    body = polled.json()
    assert body["status"] == "done" and body["context"]["digest"] == body["digest"]


def test_a_focus_sync_or_queued_ranks_the_facts_is_shown_and_replays(
    api, auth, django_capture_on_commit_callbacks
):
    recorded = api.post(
        f"/api/v1/tasks/{auth.task.id}/facts",
        {"text": "The office kitchen is cleaned on Fridays"},
        format="json",
    )
    assert recorded.status_code == 201, recorded.json()
    body = {"model": "local", "focus": "who cleans the office kitchen"}
    sync = api.post(compile_url(auth), body, format="json")
    assert sync.status_code == 200, sync.json()
    with django_capture_on_commit_callbacks(execute=True):
        queued = api.post(compile_url(auth), {**body, "async": True}, format="json")
    polled = api.get(f"/api/v1/compiles/{queued.json()['request_id']}").json()
    context = sync.json()["context"]
    assert polled["status"] == "done" and polled["digest"] == context["digest"]
    assert (
        "focus: who cleans the office kitchen" in context["prompt_block"]
        and "The office kitchen is cleaned on Fridays" in context["prompt_block"]
    )
    plain = api.post(compile_url(auth), {"model": "local"}, format="json").json()["context"]
    assert "The office kitchen is cleaned on Fridays" not in plain["prompt_block"]
    assert plain["exclusions"]["by_reason"]["below_relevance"] >= 1
    replay = api.post(f"/api/v1/contexts/{context['digest']}/replay")
    assert replay.status_code == 200 and replay.json()["matches"] is True


def test_a_focus_over_its_length_is_400_naming_the_field(api, auth):
    answer = api.post(compile_url(auth), {"model": "local", "focus": "x" * 2001}, format="json")
    assert answer.status_code == 400 and "focus" in json.dumps(answer.json())


def test_an_idempotency_key_names_the_request(api, auth):
    headers = {"HTTP_IDEMPOTENCY_KEY": "compile-1"}
    first = api.post(compile_url(auth), {"model": "local"}, format="json", **headers).json()
    events = Event.objects.count()
    again = api.post(compile_url(auth), {"model": "local"}, format="json", **headers).json()
    assert again == first and Event.objects.count() == events


def test_another_projects_ids_are_404_and_nothing_is_written(api, other_api, auth):
    context = api.post(compile_url(auth), {"model": "local"}, format="json").json()
    digest = context["context"]["digest"]
    events, stored = Event.objects.count(), StoredContext.objects.count()
    for response in (
        other_api.post(compile_url(auth), {"model": "local"}, format="json"),
        other_api.post(compile_url(auth), {"model": "local", "async": True}, format="json"),
        other_api.get(f"/api/v1/contexts/{digest}"),
        other_api.post(f"/api/v1/contexts/{digest}/replay"),
        other_api.get(f"/api/v1/contexts/{digest}/diff/{digest}"),
        other_api.get(f"/api/v1/compiles/{context['request_id']}"),
    ):
        assert response.status_code == 404, response.json()
        assert response.json()["error"]["code"] == "not_found"
    assert Event.objects.count() == events and StoredContext.objects.count() == stored


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "model"),
        ({"model": 7}, "model"),
        ({"model": "local", "overrides": {"context_tokens": -5}}, "overrides.context_tokens"),
        ({"model": "local", "overrides": {"window": 5}}, "overrides.window"),
        ({"model": "local", "evidence": [{"kind": "poem", "text": "x"}]}, "evidence[0].kind"),
        ({"model": "local", "evidence": "not a list"}, "evidence"),
        ({"model": "local", "evidence": [{"text": "a\u0000b"}]}, "evidence[0].text"),
        ({"model": "local", "async": "sometimes"}, "async"),
        ({"model": "local", "colour": "red"}, "colour"),
        ({"model": "local", "async": True, "overrides": {"tool_count": "x"}}, "overrides.tool_count"),
    ],
)
def test_bad_input_is_400_naming_the_field(api, auth, body, field):
    events = Event.objects.count()
    response = api.post(compile_url(auth), body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["field"] == field
    assert Event.objects.count() == events


def test_unknown_digests_and_requests_are_404(api, auth):
    assert api.get("/api/v1/contexts/nope").status_code == 404
    assert api.get(f"/api/v1/contexts/{'0' * 64}/replay").status_code == 404
    assert api.get("/api/v1/compiles/not-a-uuid").status_code == 404
    assert api.post(f"/api/v1/tasks/{'1' * 8}/compile", {"model": "local"}, format="json").status_code == 404


def test_the_admin_page_shows_the_context(admin_client, api, auth):
    first = api.post(compile_url(auth), {"model": "quick"}, format="json").json()["context"]
    api.post(f"/api/v1/tasks/{auth.task.id}/progress", {"text": "tried the cookie store fix"}, format="json")
    second = api.post(compile_url(auth), {"model": "quick"}, format="json").json()["context"]
    stored = StoredContext.objects.get(digest=second["digest"])
    page = admin_client.get(f"/admin/compilation/storedcontext/{stored.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    for text in (
        "Tokens per section",
        "nx-bar-fill",
        "Prompt block",
        "Excluded",
        "Truncations",
        "Replay at position",
    ):
        assert text in html
    assert "<code>below_relevance</code>" in html  # the verified Redis fact, unrelated to the step
    assert "Diff with the previous compile" in html
    earlier = StoredContext.objects.get(digest=first["digest"])
    diff = admin_client.get(f"/admin/compilation/storedcontext/{earlier.pk}/diff/{stored.pk}/")
    assert diff.status_code == 200 and "Entered" in diff.content.decode()
    replay = admin_client.get(f"/admin/compilation/storedcontext/{stored.pk}/replay/")
    assert replay.status_code == 200 and "The digests match." in replay.content.decode()
    assert admin_client.get("/admin/compilation/storedcontext/").status_code == 200


def test_the_answer_is_gzipped_when_the_caller_accepts_it_and_says_the_same(api, auth, client):
    plain = api.post(compile_url(auth), {"model": "quick"}, format="json")
    again = api.post(compile_url(auth), {"model": "quick"}, format="json", HTTP_ACCEPT_ENCODING="gzip, br")
    assert not plain.has_header("Content-Encoding") and "Accept-Encoding" in plain["Vary"]
    assert again["Content-Encoding"] == "gzip" and int(again["Content-Length"]) == len(again.content)
    assert len(again.content) * 2 < len(plain.content)
    assert json.loads(gzip.decompress(again.content))["context"] == plain.json()["context"]
    page = client.get("/admin/login/", HTTP_ACCEPT_ENCODING="gzip")
    assert page.status_code == 200 and not page.has_header("Content-Encoding")  # pages carry a CSRF token
