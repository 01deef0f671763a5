"""Forks (issue 27 item 1): a task or goal forked from a past position compiles as the source replays there,
the source's streams are untouched, every carried item names its origin, and every refusal writes nothing."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.db.models import Max

from context_app.compilation.models import StoredContext
from context_app.resolution.models import Grant
from context_app.resolution.services.grants import grant_issue, grant_revoke
from context_app.resolution.services.sources import source_register
from context_app.world.models import WorldItem
from context_app.world.services.facts import fact_record, fact_supersede
from context_app.world.services.records import failure_record, progress_record
from context_app.world.services.scopes import scope_resolve
from context_app.world.services.tools import tool_scope_set
from nexum.eventstore import projections
from nexum.eventstore.models import Event
from nexum.eventstore.verification import verify_log
from tasks_app.models import Task
from tasks_app.services.lifecycle import task_fail
from tests.integration.compile_world import build_auth_world
from verification_app.models import Contract
from verification_app.services.contracts import contract_register

pytestmark = pytest.mark.django_db


def stream_versions() -> dict[str, int]:
    return dict(Event.objects.values("stream_id").annotate(v=Max("version")).values_list("stream_id", "v"))


def compile_prompt(api, task_id) -> dict:
    answer = api.post(f"/api/v1/tasks/{task_id}/compile", {"model": "quick"}, format="json")
    assert answer.status_code == 200, answer.json()
    return answer.json()["context"]


@pytest.fixture
def forked_world(project, api):
    """The auth world compiled once (the fork point), then changed: a new failure, the verified fact
    superseded, more facts and notes."""
    auth = build_auth_world(project, filler=30)
    context = compile_prompt(api, auth.task.id)
    position = StoredContext.objects.get(digest=context["digest"]).position
    task_scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    goal_scope = scope_resolve(project_id=auth.project_id, goal_id=str(auth.goal.id))
    failure_record(scope=task_scope, text="second try failed at line 52", actor="test")
    fact_supersede(
        project_id=auth.project_id,
        fact_id=auth.redis_fact_id,
        text="Redis is optional",
        source="docs/arch.md",
        subject="redis",
        actor="test",
        role="operator",
    )
    for index in range(5):
        fact_record(scope=goal_scope, text=f"Later observation {index}", subject="auth", actor="test")
        progress_record(scope=task_scope, text=f"Later step {index}", actor="test")
    return auth, context, position


def test_a_task_fork_compiles_as_the_source_replays_at_the_position(api, operator_api, forked_world):
    auth, context, position = forked_world
    replay = api.post(f"/api/v1/contexts/{context['digest']}/replay")
    assert replay.status_code == 200 and replay.json()["matches"] is True  # the stored block is the replay's
    before = stream_versions()
    visible_then = WorldItem.objects.filter(goal_id=auth.goal.id, position__lte=position).count()

    answer = operator_api.post(
        f"/api/v1/tasks/{auth.task.id}/fork",
        {"at_position": position, "reason": "retry before the second failure"},
        format="json",
    )

    assert answer.status_code == 201, answer.json()
    fork = answer.json()
    assert fork["source_task_id"] == str(auth.task.id) and fork["source_goal_id"] == str(auth.goal.id)
    assert fork["at_position"] == position and fork["carried_items"] == visible_then
    forked_task = Task.objects.get(id=fork["task_id"])
    assert (forked_task.key, forked_task.state, forked_task.forked_from) == ("s3", "pending", auth.task.id)
    assert compile_prompt(api, fork["task_id"])["prompt_block"] == context["prompt_block"]
    after = stream_versions()
    assert {stream: after[stream] for stream in before} == before  # the source is untouched
    carried = WorldItem.objects.filter(goal_id=fork["goal_id"])
    origins = dict(carried.values_list("forked_from", "id"))
    assert len(origins) == carried.count() == visible_then
    assert set(WorldItem.objects.filter(id__in=origins).values_list("goal_id", flat=True)) == {auth.goal.id}
    redis_copy = carried.get(forked_from=auth.redis_fact_id)
    assert (redis_copy.status, redis_copy.verified, redis_copy.text) == ("current", True, "Redis is required")


def test_a_goal_fork_carries_the_plan_and_shows_as_a_tree(api, operator_api, forked_world):
    auth, context, position = forked_world
    body = {"at_position": position, "reason": "two attempts side by side", "key": "fork-1"}
    first = operator_api.post(f"/api/v1/goals/{auth.goal.id}/fork", body, format="json")
    assert first.status_code == 201, first.json()
    fork = first.json()
    assert fork["task_id"] is None and list(fork["task_ids"]) == [str(auth.task.id)]
    copy = fork["task_ids"][str(auth.task.id)]
    assert compile_prompt(api, copy)["prompt_block"] == context["prompt_block"]

    written = Event.objects.count()
    again = operator_api.post(f"/api/v1/goals/{auth.goal.id}/fork", body, format="json")
    assert again.status_code == 200 and again.json() == {**fork, "replayed": True}
    assert Event.objects.count() == written

    source = api.get(f"/api/v1/tasks/{auth.task.id}").json()
    assert [(node["id"], node["at_position"]) for node in source["forks"]] == [(copy, position)]
    forked = api.get(f"/api/v1/goals/{fork['goal_id']}").json()
    assert forked["forked_from"] == str(auth.goal.id) and forked["forked_at_position"] == position
    assert [node["id"] for node in api.get(f"/api/v1/goals/{auth.goal.id}").json()["forks"]] == [
        fork["goal_id"]
    ]


def test_the_admin_shows_a_goals_forks_as_a_tree(admin_client, operator_api, forked_world):
    auth, _context, position = forked_world
    body = {"at_position": position, "reason": "r"}
    first = operator_api.post(f"/api/v1/goals/{auth.goal.id}/fork", body, format="json").json()
    head = Event.objects.aggregate(p=Max("position"))["p"]
    second = operator_api.post(
        f"/api/v1/goals/{first['goal_id']}/fork", {"at_position": head, "reason": "r"}, format="json"
    ).json()
    page = admin_client.get(f"/admin/tasks_app/goal/{auth.goal.id}/change/").content.decode()
    assert "Forks (source → forks)" in page
    assert page.index(first["goal_id"]) < page.index(second["goal_id"])  # the fork's fork, nested under it


def test_refusals_write_nothing(api, operator_api, other_operator_api, forked_world, project):
    auth, _context, position = forked_world
    head = Event.objects.filter(project_id=project.id).aggregate(p=Max("position"))["p"]
    url = f"/api/v1/tasks/{auth.task.id}/fork"
    goal_as_task = f"/api/v1/tasks/{auth.goal.id}/fork"
    written = Event.objects.count()
    cases = [
        (api, url, {"at_position": position, "reason": "r"}, 403, "forbidden", None),
        (
            operator_api,
            url,
            {"at_position": head + 10, "reason": "r"},
            422,
            "position_outside_log",
            "at_position",
        ),
        (operator_api, url, {"at_position": 0, "reason": "r"}, 400, None, "at_position"),
        (operator_api, url, {"at_position": "soon", "reason": "r"}, 400, None, "at_position"),
        (operator_api, url, {"reason": "r"}, 400, None, "at_position"),
        (operator_api, url, {"at_position": position}, 400, None, "reason"),
        (operator_api, url, {"at_position": position, "reason": "r", "extra": 1}, 400, None, "extra"),
        (operator_api, goal_as_task, {"at_position": position, "reason": "r"}, 400, "is_a_goal", "task_id"),
        (other_operator_api, url, {"at_position": position, "reason": "r"}, 404, "not_found", None),
    ]
    for client, target, body, status, code, field in cases:
        answer = client.post(target, body, format="json")
        assert answer.status_code == status, (body, answer.json())
        error = answer.json()["error"]
        assert error["message"]
        if code:
            assert error["code"] == code, error
        if field:
            assert error["field"] == field, error
    first_event = Event.objects.filter(stream_id=f"task-{auth.task.id}").aggregate(p=Max("position"))["p"]
    created = Event.objects.filter(stream_id=f"task-{auth.task.id}", version=1).get().position
    before_creation = operator_api.post(url, {"at_position": created - 1, "reason": "r"}, format="json")
    assert before_creation.status_code == 422 and before_creation.json()["error"]["code"] == "not_yet_created"
    assert first_event >= created
    assert Event.objects.count() == written

    keyed = {"at_position": position, "reason": "r", "key": "k"}
    assert operator_api.post(url, keyed, format="json").status_code == 201
    written = Event.objects.count()
    reused = operator_api.post(url, {**keyed, "reason": "another"}, format="json")
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "idempotency_key_reused"
    assert Event.objects.count() == written


def test_a_fork_carries_the_contract_grants_and_tool_scope_as_they_stood(
    api, operator_api, project, tmp_path, settings, forked_world
):
    """Registered before the position: carried as they stood; changed after it: the fork does not see it."""
    auth, _context, _position = forked_world
    settings.NEXUM_SOURCE_ROOTS = [tmp_path]
    (tmp_path / "repo").mkdir()
    source_register(
        project_id=auth.project_id,
        name="repo",
        kind="folder",
        config={"path": str(tmp_path / "repo")},
        actor="op",
    )
    grant_issue(project_id=auth.project_id, task_id=str(auth.task.id), sources={"repo": ["*"]}, actor="op")
    revoked_later = grant_issue(
        project_id=auth.project_id, goal_id=str(auth.goal.id), sources={"repo": ["*"]}, actor="op"
    )
    contract = {
        "checks": [
            {"kind": "artifact_matches", "name": "green", "artifact_digest": "0" * 64, "pattern": "ok"}
        ]
    }
    contract_register(project_id=auth.project_id, task_id=str(auth.task.id), contract=contract, actor="op")
    tool_scope_set(
        scope=scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id)),
        allowed=["tool_00", "tool_01"],
        pinned=["tool_01"],
        actor="op",
    )
    position = Event.objects.filter(project_id=project.id).aggregate(p=Max("position"))["p"]
    grant_revoke(project_id=auth.project_id, grant_id=str(revoked_later.id), reason="done", actor="op")
    task_fail(project_id=auth.project_id, task_id=str(auth.task.id), actor="op")
    grant_issue(
        project_id=auth.project_id,
        task_id=str(auth.task.id),
        sources={"repo": ["*"]},
        reason="issued after the position",
        actor="op",
    )
    contract_register(
        project_id=auth.project_id, task_id=str(auth.task.id), contract={"checks": []}, actor="op"
    )

    fork = operator_api.post(
        f"/api/v1/tasks/{auth.task.id}/fork", {"at_position": position, "reason": "r"}, format="json"
    ).json()

    copy = fork["task_id"]
    carried = Contract.objects.get(task_id=copy)
    assert [check["name"] for check in carried.checks] == ["green"]
    grants = Grant.objects.filter(goal_id=fork["goal_id"])
    assert {(str(g.task_id) if g.task_id else None, tuple(g.scopes)) for g in grants} == {
        (copy, ("repo",)),
        (None, ("repo",)),
    }
    assert "issued after the position" not in {g.reason for g in grants}
    tools = api.get(f"/api/v1/tasks/{copy}/tools").json()
    source_tools = api.get(f"/api/v1/tasks/{auth.task.id}/tools").json()
    assert tools == {**source_tools, "goal_id": fork["goal_id"], "task_id": copy}


def test_a_fork_rebuilds_as_it_was_written_and_its_chain_verifies(operator_api, forked_world):
    auth, _context, position = forked_world
    answer = operator_api.post(
        f"/api/v1/goals/{auth.goal.id}/fork", {"at_position": position, "reason": "r"}, format="json"
    )
    assert answer.status_code == 201
    assert verify_log().ok  # the carried items' events are chained like any other
    with transaction.atomic():
        live = projections.snapshot()
        projections.rebuild()
        assert projections.snapshot() == live
        transaction.set_rollback(True)
