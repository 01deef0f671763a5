"""The resolver service's pure rules (nexum/core/resolution.py): grants in force, gaps, the gate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nexum.core import resolution as core
from nexum.core.errors import ValidationFailed
from nexum.core.resolver import Escalation

NOW = datetime(2025, 3, 1, tzinfo=UTC)


def test_the_grant_in_force_is_the_union_of_unexpired_grants():
    grants = [
        core.GrantRecord({"repo": ("src/",)}, None),
        core.GrantRecord({"repo": ("docs/",), "web": ("*",)}, NOW + timedelta(hours=1)),
        core.GrantRecord({"tickets": ("*",)}, NOW - timedelta(hours=1)),
    ]
    grant = core.effective_grant(grants, NOW)
    assert dict(grant.scopes) == {"repo": ("docs/", "src/"), "web": ("*",)}
    assert grant.expires_at is None


def test_only_expired_grants_give_an_expired_grant_and_none_gives_none():
    expired = [core.GrantRecord({"web": ("*",)}, NOW - timedelta(hours=2))]
    assert core.effective_grant(expired, NOW).expires_at == NOW - timedelta(hours=2)
    assert core.effective_grant([], NOW) is None


def test_gaps_escalate_once_and_resolved_gaps_stay_resolved():
    a = Escalation(kind="conflict", missing="which port", reason="r", conflict_group="g1")
    b = Escalation(kind="unanswered", missing="an answer to: who", reason="r")
    plan = core.plan_escalations([a, b], open_by_key={a.key: "e1", "gone": "e9"}, resolved_keys={b.key})
    assert plan.to_open == () and plan.still_open == ("e1",) and plan.to_close == ("e9",)
    fresh = core.plan_escalations([a, b], open_by_key={}, resolved_keys=())
    assert [gap.key for gap in fresh.to_open] == [a.key, b.key]


def test_a_narrowed_resolve_opens_gaps_but_closes_none():
    a = Escalation(kind="conflict", missing="which port", reason="r", conflict_group="g1")
    b = Escalation(kind="unanswered", missing="an answer to: who", reason="r")
    plan = core.plan_escalations([b], open_by_key={a.key: "e1"}, resolved_keys=(), narrowed=True)
    assert plan.to_close == () and plan.still_open == ("e1",) and plan.to_open == (b,)


def test_the_plan_gate_is_closed_only_by_open_escalations_without_override():
    core.decide_plan_gate(
        has_bundle=False, complete=False, open_escalations=[{"kind": "x"}], overridden=False
    )
    core.decide_plan_gate(has_bundle=True, complete=True, open_escalations=[], overridden=False)
    gap = {"id": "e1", "kind": "conflict", "missing": "which port"}
    core.decide_plan_gate(has_bundle=True, complete=False, open_escalations=[gap], overridden=True)
    with pytest.raises(core.PlanGateClosed) as closed:
        core.decide_plan_gate(has_bundle=True, complete=False, open_escalations=[gap], overridden=False)
    assert closed.value.code == "plan_gate_closed" and closed.value.details["open_escalations"] == [gap]


def test_picking_a_side_rejects_the_others():
    assert core.decide_pick_side(["a", "b", "c"], ["a"]) == ("b", "c")
    for chosen in ([], ["z"], ["a", "b", "c"]):
        with pytest.raises(ValidationFailed):
            core.decide_pick_side(["a", "b", "c"], chosen)


@pytest.mark.parametrize(
    "scopes",
    [{}, {"../x": []}, {"web": "*"}, {"web": [""]}, {"web": [1]}, "web"],
)
def test_malformed_grant_scopes_are_refused(scopes):
    with pytest.raises(ValidationFailed):
        core.check_grant_scopes(scopes)


def test_questions_are_checked_and_round_trip():
    questions = core.check_questions([{"question": "Which port?", "subject": "deploy port"}])
    assert core.questions_from_data(core.questions_to_data(questions)) == questions
    for bad in ("x", [{"question": ""}], [{"question": "q", "subjects": "s"}], [{"question": "q", "x": 1}]):
        with pytest.raises(ValidationFailed):
            core.check_questions(bad)
