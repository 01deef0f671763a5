"""The project's retention policy (issue 27 item 4): read by any token, set by an operator as an event;
refusals name the member and write nothing."""

from __future__ import annotations

import pytest

from nexum.eventstore.models import Event
from tasks_app.models import Project

pytestmark = pytest.mark.django_db

URL = "/api/v1/project/retention"
POLICY = {"context_days": 30, "bundle_days": None, "check_output_days": 7}


def policy_events(project) -> int:
    return Event.objects.filter(event_type="ProjectRetentionSet", project_id=project.id).count()


def test_any_token_reads_the_policy_and_the_service_defaults_apply(api, project, settings):
    settings.NEXUM_RETENTION_BUNDLE_DAYS = 90
    answer = api.get(URL)
    assert answer.status_code == 200
    assert answer.json() == {
        "policy": {"context_days": None, "bundle_days": None, "check_output_days": None},
        "effective": {"contexts": None, "bundles": 90, "check_output": None},
        "pruned": {"contexts": 0, "bundles": 0, "check_output": 0, "bytes_freed": 0},
        "version": Project.objects.get(id=project.id).version,
    }


def test_an_operator_sets_the_policy_as_one_event(operator_api, project, settings):
    settings.NEXUM_RETENTION_BUNDLE_DAYS = 90
    answer = operator_api.put(URL, POLICY, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["policy"] == POLICY
    assert answer.json()["effective"] == {"contexts": 30, "bundles": 90, "check_output": 7}
    assert policy_events(project) == 1
    assert operator_api.put(URL, POLICY, format="json").status_code == 200
    assert policy_events(project) == 1  # the same policy again writes nothing
    event = Event.objects.get(event_type="ProjectRetentionSet")
    assert event.data == POLICY and event.metadata["actor"].startswith("operator")


def test_an_agent_may_not_set_the_policy_and_nothing_is_written(api, project):
    answer = api.put(URL, POLICY, format="json")
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"
    assert "retention policy" in answer.json()["error"]["message"]
    assert policy_events(project) == 0


@pytest.mark.parametrize("member", ["context_days", "bundle_days", "check_output_days"])
@pytest.mark.parametrize("value", [0, -3, 36_501, 1.5, "30", True, [30]])
def test_a_bad_number_of_days_is_refused_naming_the_member(operator_api, project, member, value):
    answer = operator_api.put(URL, {**POLICY, member: value}, format="json")
    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["field"] == member
    assert policy_events(project) == 0


def test_an_unknown_or_a_missing_member_is_refused(operator_api, project):
    assert operator_api.put(URL, {**POLICY, "artifact_days": 3}, format="json").status_code == 400
    missing = operator_api.put(URL, {"context_days": 3}, format="json")
    assert missing.status_code == 400 and missing.json()["error"]["field"] == "bundle_days"
    assert policy_events(project) == 0
