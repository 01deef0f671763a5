"""The resolver service's pure rules (nexum/core/resolution/rules.py): grants in force, gaps, the gate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nexum.core.errors import ValidationFailed
from nexum.core.resolution import rules as resolution_rules
from nexum.core.resolution.resolver import Escalation

NOW = datetime(2025, 3, 1, tzinfo=UTC)


def test_the_grant_in_force_is_the_union_of_unexpired_grants():
    grants = [
        resolution_rules.GrantRecord({"repo": ("src/",)}, None),
        resolution_rules.GrantRecord({"repo": ("docs/",), "web": ("*",)}, NOW + timedelta(hours=1)),
        resolution_rules.GrantRecord({"tickets": ("*",)}, NOW - timedelta(hours=1)),
    ]
    grant = resolution_rules.effective_grant(grants, NOW)
    assert dict(grant.scopes) == {"repo": ("docs/", "src/"), "web": ("*",)}
    assert grant.expires_at is None


def test_only_expired_grants_give_an_expired_grant_and_none_gives_none():
    expired = [resolution_rules.GrantRecord({"web": ("*",)}, NOW - timedelta(hours=2))]
    assert resolution_rules.effective_grant(expired, NOW).expires_at == NOW - timedelta(hours=2)
    assert resolution_rules.effective_grant([], NOW) is None


def test_gaps_escalate_once_and_resolved_gaps_stay_resolved():
    a = Escalation(kind="conflict", missing="which port", reason="r", conflict_group="g1")
    b = Escalation(kind="unanswered", missing="an answer to: who", reason="r")
    plan = resolution_rules.plan_escalations(
        [a, b], open_by_key={a.key: "e1", "gone": "e9"}, resolved_keys={b.key}
    )
    assert plan.to_open == () and plan.still_open == ("e1",) and plan.to_close == ("e9",)
    fresh = resolution_rules.plan_escalations([a, b], open_by_key={}, resolved_keys=())
    assert [gap.key for gap in fresh.to_open] == [a.key, b.key]


def test_a_narrowed_resolve_opens_gaps_but_closes_none():
    a = Escalation(kind="conflict", missing="which port", reason="r", conflict_group="g1")
    b = Escalation(kind="unanswered", missing="an answer to: who", reason="r")
    plan = resolution_rules.plan_escalations([b], open_by_key={a.key: "e1"}, resolved_keys=(), narrowed=True)
    assert plan.to_close == () and plan.still_open == ("e1",) and plan.to_open == (b,)


def test_the_plan_gate_is_closed_only_by_open_escalations_without_override():
    resolution_rules.decide_plan_gate(
        has_bundle=False, complete=False, open_escalations=[{"kind": "x"}], overridden=False
    )
    resolution_rules.decide_plan_gate(has_bundle=True, complete=True, open_escalations=[], overridden=False)
    gap = {"id": "e1", "kind": "conflict", "missing": "which port"}
    resolution_rules.decide_plan_gate(
        has_bundle=True, complete=False, open_escalations=[gap], overridden=True
    )
    with pytest.raises(resolution_rules.PlanGateClosed) as closed:
        resolution_rules.decide_plan_gate(
            has_bundle=True, complete=False, open_escalations=[gap], overridden=False
        )
    assert closed.value.code == "plan_gate_closed" and closed.value.details["open_escalations"] == [gap]


def test_picking_a_side_rejects_the_others():
    assert resolution_rules.decide_pick_side(["a", "b", "c"], ["a"]) == ("b", "c")
    for chosen in ([], ["z"], ["a", "b", "c"]):
        with pytest.raises(ValidationFailed):
            resolution_rules.decide_pick_side(["a", "b", "c"], chosen)


@pytest.mark.parametrize(
    "scopes",
    [{}, {"../x": []}, {"web": "*"}, {"web": [""]}, {"web": [1]}, "web"],
)
def test_malformed_grant_scopes_are_refused(scopes):
    with pytest.raises(ValidationFailed):
        resolution_rules.check_grant_scopes(scopes)


def test_questions_are_checked_and_round_trip():
    questions = resolution_rules.check_questions([{"question": "Which port?", "subject": "deploy port"}])
    assert resolution_rules.questions_from_data(resolution_rules.questions_to_data(questions)) == questions
    for bad in ("x", [{"question": ""}], [{"question": "q", "subjects": "s"}], [{"question": "q", "x": 1}]):
        with pytest.raises(ValidationFailed):
            resolution_rules.check_questions(bad)
