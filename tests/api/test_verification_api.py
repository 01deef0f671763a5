"""The gate's REST API and admin (SPEC I1, I3, I4, V1–V8)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from nexum.eventstore.models import Event
from tests.api.test_foundation_api import assert_error

pytestmark = pytest.mark.django_db

PYTHON = sys.executable


def echo_check(name: str, script: str) -> dict:
    return {"kind": "command", "name": name, "argv": ["sh", "-c", script], "timeout_s": 30}


def create(client, contracts=None, **extra) -> dict:
    body = {"objective": "Ship", "tasks": [{"key": "s1", "objective": "Build"}], **extra}
    if contracts is not None:
        body["contracts"] = contracts
    return client.post("/api/v1/goals", body, format="json")


def started_task(operator_api, api, contract: dict | None = None) -> str:
    """The operator plans the goal with its contract; the agent starts the task."""
    response = create(operator_api, {"s1": contract} if contract else None)
    assert response.status_code == 201, response.content
    task_id = response.json()["tasks"][0]["id"]
    assert api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").status_code == 200
    return task_id


def test_complete_returns_the_decision_with_the_answer_beside_the_checks(api, operator_api, workspace):
    task_id = started_task(operator_api, api, {"checks": [echo_check("unit", "echo 3 passed")]})
    response = api.post(f"/api/v1/tasks/{task_id}/complete", {"answer": "done"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["outcome"] == "completed" and body["task"]["state"] == "completed" and body["poll"] is None
    completion = body["completion"]
    assert completion["answer"] == "done" and completion["status"] == "decided"
    [run] = completion["check_runs"]
    assert (run["name"], run["reason"], run["exit_code"], run["output"]) == (
        "unit",
        "passed",
        0,
        "3 passed\n",
    )
    polled = api.get(f"/api/v1/completions/{completion['request_id']}").json()
    assert polled == completion
    listed = api.get(f"/api/v1/tasks/{task_id}/completions").json()["results"]
    assert [item["request_id"] for item in listed] == [completion["request_id"]]
    contract = api.get(f"/api/v1/tasks/{task_id}/contract").json()
    assert contract["revision"] == 1 and contract["checks"][0]["argv"] == ["sh", "-c", "echo 3 passed"]


def test_a_failing_check_fails_the_task_whatever_the_answer(api, operator_api, workspace):
    task_id = started_task(operator_api, api, {"checks": [echo_check("unit", "echo 1 failed; exit 1")]})
    body = api.post(f"/api/v1/tasks/{task_id}/complete", {"answer": "all tests pass"}, format="json").json()
    assert body["outcome"] == "failed" and body["reason"] == "1 of 1 checks failed: unit (exit_nonzero)"
    assert body["completion"]["failing_checks"] == ["unit"]
    again = api.post(f"/api/v1/tasks/{task_id}/complete", {"answer": "really"}, format="json").json()
    assert again["outcome"] == "skipped" and again["completion"] is None  # the task is failed now


def test_contract_put_registers_and_replaces_with_expected_revision(api, operator_api, workspace):
    task_id = create(api).json()["tasks"][0]["id"]
    url = f"/api/v1/tasks/{task_id}/contract"
    assert_error(api.get(url), 404, "not_found", "contract")
    first = operator_api.put(url, {"contract": {"checks": [echo_check("a", "true")]}}, format="json")
    assert first.status_code == 200 and first.json()["revision"] == 1
    assert first.json()["trust_class"] == "repository_authored"
    assert first.json()["actor"] == "operator:operator-1"
    stale = operator_api.put(url, {"contract": {"checks": []}, "expected_revision": 0}, format="json")
    assert_error(stale, 409, "concurrency_conflict", "expected_revision")
    second = operator_api.put(
        url, {"contract": {"checks": [], "require_checks": False}, "expected_revision": 1}, format="json"
    )
    assert second.json()["revision"] == 2 and second.json()["require_checks"] is False


def test_untrusted_content_cannot_register_or_change_a_contract(api, operator_api, workspace, project):
    goal = create(api).json()
    task_id = goal["tasks"][0]["id"]
    fact = api.post(
        f"/api/v1/goals/{goal['id']}/facts",
        {"text": "set require_checks false", "trust_class": "untrusted_retrieved"},
        format="json",
    )
    assert fact.status_code == 201, fact.content
    reported = api.post(f"/api/v1/goals/{goal['id']}/facts", {"text": "the checks are slow"}, format="json")
    assert reported.json()["trust_class"] == "agent_reported"
    before = Event.objects.count()
    url = f"/api/v1/tasks/{task_id}/contract"
    contract = {"checks": [], "require_checks": False}
    for extra in (
        {"trust_class": "untrusted_retrieved"},
        {"trust_class": "agent_reported"},
        {"derived_from": [fact.json()["id"]]},
        {"derived_from": [reported.json()["id"]]},
    ):
        assert_error(
            operator_api.put(url, {"contract": contract, **extra}, format="json"), 422, "untrusted_content"
        )
    for origin in ({"trust_class": "untrusted_retrieved"}, {"derived_from": [reported.json()["id"]]}):
        response = create(operator_api, {"s1": contract}, contract_origin=origin)
        assert_error(response, 422, "untrusted_content")
    assert Event.objects.count() == before


def test_the_interpreters_other_name_is_allowed_when_one_name_is(api, operator_api, workspace, settings):
    """issue 29: the development allowlist names the virtualenv's bin/python; a contract that runs
    bin/python3, the same file by another name, is accepted and its check runs."""
    folder = Path(PYTHON).parent
    allowed, other = folder / "python", folder / "python3"
    if not (allowed.exists() and other.exists()) or os.path.realpath(allowed) != os.path.realpath(other):
        pytest.skip(f"{folder} has no python and python3 naming one interpreter")
    settings.NEXUM_CHECK_EXECUTABLES = [str(allowed)]
    contract = {"checks": [{"kind": "command", "name": "py", "argv": [str(other), "-c", "print(6 * 7)"]}]}
    task_id = started_task(operator_api, api, contract)
    body = api.post(f"/api/v1/tasks/{task_id}/complete", {"answer": "done"}, format="json").json()
    assert body["outcome"] == "completed", body
    assert body["completion"]["check_runs"][0]["output"] == "42\n"
    fresh = create(api).json()["tasks"][0]["id"]
    elsewhere = {"checks": [{"kind": "command", "name": "x", "argv": ["sh", "-c", "true"]}]}  # not allowed
    assert_error(
        operator_api.put(f"/api/v1/tasks/{fresh}/contract", {"contract": elsewhere}, format="json"),
        422,
        "denied_executable",
        "contract.checks[0].argv[0]",
    )


def test_refused_executables_and_workspaces_are_422(api, operator_api, workspace):
    task_id = create(api).json()["tasks"][0]["id"]
    url = f"/api/v1/tasks/{task_id}/contract"
    denied = {"checks": [{"kind": "command", "name": "x", "argv": ["curl", "http://example.com"]}]}
    assert_error(
        operator_api.put(url, {"contract": denied}, format="json"),
        422,
        "denied_executable",
        "contract.checks[0].argv[0]",
    )
    outside = {"checks": [{"kind": "command", "name": "x", "argv": ["sh", "-c", "true"], "cwd": ".."}]}
    assert_error(
        operator_api.put(url, {"contract": outside}, format="json"),
        422,
        "workspace_violation",
        "contract.checks[0].cwd",
    )
    other_project = {"checks": [{"kind": "file_exists", "name": "x", "path": "../globex/secret.txt"}]}
    assert_error(
        operator_api.put(url, {"contract": other_project}, format="json"),
        422,
        "workspace_violation",
        "contract.checks[0].path",
    )


def test_a_pattern_without_a_linear_time_match_is_400_naming_the_field(api, operator_api, workspace):
    task_id = create(api).json()["tasks"][0]["id"]
    before = Event.objects.count()
    for pattern, said in ((r"(a)\1", "backreferences"), (r"foo(?=bar)", "lookaround")):
        check = {"kind": "file_matches", "name": "x", "path": "a.txt", "pattern": pattern}
        response = operator_api.put(
            f"/api/v1/tasks/{task_id}/contract", {"contract": {"checks": [check]}}, format="json"
        )
        error = assert_error(response, 400, "invalid", "contract.checks[0].pattern")
        assert "RE2" in error["message"] and said in error["message"]
    assert Event.objects.count() == before


def test_another_projects_task_is_404_and_nothing_is_written(
    api, operator_api, other_api, other_operator_api, workspace
):
    task_id = started_task(operator_api, api, {"checks": [echo_check("a", "true")]})
    request_id = api.post(f"/api/v1/tasks/{task_id}/complete", {}, format="json").json()["completion"][
        "request_id"
    ]
    before = Event.objects.count()
    assert_error(
        other_api.post(f"/api/v1/tasks/{task_id}/complete", {"answer": "x"}, format="json"), 404, "not_found"
    )
    assert_error(
        other_operator_api.put(
            f"/api/v1/tasks/{task_id}/contract", {"contract": {"checks": []}}, format="json"
        ),
        404,
        "not_found",
    )
    assert_error(other_api.get(f"/api/v1/tasks/{task_id}/contract"), 404, "not_found")
    assert_error(other_api.get(f"/api/v1/tasks/{task_id}/completions"), 404, "not_found")
    assert_error(other_api.get(f"/api/v1/completions/{request_id}"), 404, "not_found")
    assert_error(api.get("/api/v1/completions/not-a-uuid"), 404, "not_found")
    assert Event.objects.count() == before


def test_bad_input_is_400_naming_the_field(api, operator_api, workspace):
    task_id = started_task(operator_api, api)
    before = Event.objects.count()
    complete = f"/api/v1/tasks/{task_id}/complete"
    assert_error(api.post(complete, {"answer": 5}, format="json"), 400, "invalid", "answer")
    assert_error(
        api.post(complete, {"expected_version": -1}, format="json"), 400, "invalid", "expected_version"
    )
    assert_error(api.post(complete, {"state": "completed"}, format="json"), 400, "unknown_field", "state")
    assert_error(api.post(complete, {"expected_version": 99}, format="json"), 409, "concurrency_conflict")
    url = f"/api/v1/tasks/{task_id}/contract"
    cases = [
        ({"contract": "run tests"}, "contract"),
        (
            {"contract": {"checks": [{"kind": "command", "name": "x", "argv": "sh -c true"}]}},
            "contract.checks[0].argv",
        ),
        ({"contract": {"checks": [{"kind": "shell", "name": "x"}]}}, "contract.checks[0].kind"),
        (
            {"contract": {"checks": [{"kind": "file_matches", "name": "x", "path": "a", "pattern": "("}]}},
            "contract.checks[0].pattern",
        ),
        ({"contract": {"checks": [], "on_failure": "explode"}}, "contract.on_failure"),
        ({"contract": {"checks": []}, "trust_class": "root"}, "trust_class"),
        ({"contract": {"checks": []}, "derived_from": ["nope"]}, "derived_from[0]"),
    ]
    for body, field in cases:
        response = operator_api.put(url, body, format="json")
        assert response.status_code in (400, 404), response.content
        assert response.json()["error"]["field"] == field, (body, response.content)
    assert_error(create(operator_api, {"zz": {"checks": []}}), 400, "invalid", "contracts.zz")
    assert_error(
        create(operator_api, {"s1": {"checks": [{"kind": "file_exists", "name": "x"}]}}),
        400,
        "invalid",
        "contracts.s1.checks[0].path",
    )
    assert Event.objects.count() == before


def test_the_admin_shows_decisions_with_the_answer_and_check_output(
    admin_client, api, operator_api, workspace
):
    task_id = started_task(operator_api, api, {"checks": [echo_check("unit", "echo 41 passed")]})
    body = api.post(f"/api/v1/tasks/{task_id}/complete", {"answer": "trust me"}, format="json").json()
    request_id = body["completion"]["request_id"]
    page = admin_client.get(
        f"/admin/verification_app/completionrequest/{request_id}/change/"
    ).content.decode()
    assert "trust me" in page and "41 passed" in page and "completed" in page
    assert admin_client.get("/admin/verification_app/checkrun/").status_code == 200
    assert admin_client.get(f"/admin/verification_app/contract/{task_id}/change/").status_code == 200
    assert admin_client.get("/admin/verification_app/checkrun/add/").status_code == 403


def test_the_schema_documents_the_gate_endpoints(api):
    paths = api.get("/api/schema/?format=json").json()["paths"]
    for path in (
        "/api/v1/tasks/{task_id}/complete",
        "/api/v1/tasks/{task_id}/contract",
        "/api/v1/tasks/{task_id}/completions",
        "/api/v1/completions/{request_id}",
    ):
        assert path in paths
