"""The resolver service's pure rules (nexum/core/resolution/: authorization, checks, escalations, settlements,
record): grants in force, gaps, the gate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nexum.core.errors import NotFound, ValidationFailed
from nexum.core.resolution.authorization import GrantRecord, effective_grant
from nexum.core.resolution.escalations import (
    PlanGateClosed,
    decide_pick_side,
    decide_plan_gate,
    plan_escalations,
)
from nexum.core.resolution.model import EscalationSpec
from nexum.core.resolution.record import escalation_id_for, resolve_events
from nexum.core.resolution.settlements import (
    Settlement,
    rejected_items,
    settled_detail,
    settlement_of,
    settles,
)
from nexum.core.resolution.validation import (
    questions_from_data,
    questions_to_data,
    validate_grant_scopes,
    validate_questions,
)

NOW = datetime(2025, 3, 1, tzinfo=UTC)


def test_the_grant_in_force_is_the_union_of_unexpired_grants():
    grants = [
        GrantRecord({"repo": ("src/",)}, None),
        GrantRecord({"repo": ("docs/",), "web": ("*",)}, NOW + timedelta(hours=1)),
        GrantRecord({"tickets": ("*",)}, NOW - timedelta(hours=1)),
    ]
    grant = effective_grant(grants, NOW)
    assert dict(grant.scopes) == {"repo": ("docs/", "src/"), "web": ("*",)}
    assert grant.expires_at is None


def test_only_expired_grants_give_an_expired_grant_and_none_gives_none():
    expired = [GrantRecord({"web": ("*",)}, NOW - timedelta(hours=2))]
    assert effective_grant(expired, NOW).expires_at == NOW - timedelta(hours=2)
    assert effective_grant([], NOW) is None


def test_gaps_escalate_once_and_resolved_gaps_stay_resolved():
    a = EscalationSpec(kind="conflict", missing="which port", reason="r", conflict_group="g1")
    b = EscalationSpec(kind="unanswered", missing="an answer to: who", reason="r")
    plan = plan_escalations([a, b], open_by_key={a.key: "e1", "gone": "e9"}, resolved_keys={b.key})
    assert plan.to_open == () and plan.still_open == ("e1",) and plan.to_close == ("e9",)
    fresh = plan_escalations([a, b], open_by_key={}, resolved_keys=())
    assert [gap.key for gap in fresh.to_open] == [a.key, b.key]


def test_a_narrowed_resolve_opens_gaps_but_closes_none():
    a = EscalationSpec(kind="conflict", missing="which port", reason="r", conflict_group="g1")
    b = EscalationSpec(kind="unanswered", missing="an answer to: who", reason="r")
    plan = plan_escalations([b], open_by_key={a.key: "e1"}, resolved_keys=(), narrowed=True)
    assert plan.to_close == () and plan.still_open == ("e1",) and plan.to_open == (b,)


def test_a_settled_conflict_is_settled_for_the_goal_on_its_subject_and_members_only():
    picked = settlement_of(
        escalation_id="e1",
        kind="conflict",
        subjects=["deploy port"],
        members=["d1", "d2", "d3"],
        resolution="pick_side",
        detail={"chosen": ["d1"], "rejected": ["d2", "d3"]},
    )
    assert picked == Settlement("e1", "deploy port", frozenset({"d1", "d2", "d3"}), frozenset({"d2", "d3"}))
    for kind, resolution in (
        ("stale_only", "supply_fact"),
        ("conflict", "grant_source"),
        ("conflict", "cancel"),
    ):
        assert (
            settlement_of(
                escalation_id="e", kind=kind, subjects=["x"], members=["d1"], resolution=resolution, detail={}
            )
            is None
        )
    # the same subject (however written) among the same members or some of them: nothing new to decide
    assert settles(picked, kind="conflict", subjects=["Deploy  PORT"], members=["d1", "d2"])
    assert not settles(picked, kind="conflict", subjects=["deploy port"], members=["d1", "d4"])
    assert not settles(picked, kind="conflict", subjects=["release date"], members=["d1", "d2"])
    assert not settles(picked, kind="stale_only", subjects=["deploy port"], members=["d1"])

    settled = EscalationSpec(
        kind="conflict",
        missing="which port",
        reason="r",
        subjects=("deploy port",),
        item_digests=("d1", "d2"),
    )
    new_claim = EscalationSpec(
        kind="conflict",
        missing="which port",
        reason="r",
        subjects=("deploy port",),
        item_digests=("d1", "d4"),
    )
    plan = plan_escalations([settled, new_claim], open_by_key={}, resolved_keys=(), settlements=[picked])
    assert plan.to_open == (new_claim,)

    # rejected where the item is on the settlement's subject, on any task of the goal
    items = [("d1", "deploy port"), ("d2", "Deploy port"), ("d3", "release date"), ("d2", None)]
    assert rejected_items([picked], items) == frozenset({"d2"})
    assert settled_detail(
        {"chosen": ["d1"], "rejected": ["d2", "d3"]}, settled_by="e1", members=["d1", "d2"]
    ) == {"settled_by": "e1", "chosen": ["d1"], "rejected": ["d2"]}
    assert settled_detail({"fact_id": "f"}, settled_by="e1", members=["d1"]) == {
        "settled_by": "e1",
        "fact_id": "f",
    }


def test_the_plan_gate_is_closed_only_by_open_escalations_without_override():
    decide_plan_gate(has_bundle=False, complete=False, open_escalations=[{"kind": "x"}], overridden=False)
    decide_plan_gate(has_bundle=True, complete=True, open_escalations=[], overridden=False)
    gap = {"id": "e1", "kind": "conflict", "missing": "which port"}
    decide_plan_gate(has_bundle=True, complete=False, open_escalations=[gap], overridden=True)
    with pytest.raises(PlanGateClosed) as closed:
        decide_plan_gate(has_bundle=True, complete=False, open_escalations=[gap], overridden=False)
    assert closed.value.code == "plan_gate_closed" and closed.value.details["open_escalations"] == [gap]


def test_picking_a_side_rejects_the_others():
    assert decide_pick_side(["a", "b", "c"], ["a"]) == ("b", "c")
    for chosen in ([], ["z"], ["a", "b", "c"]):
        with pytest.raises(ValidationFailed):
            decide_pick_side(["a", "b", "c"], chosen)


@pytest.mark.parametrize(
    "scopes",
    [{}, {"web": "*"}, {"web": [""]}, {"web": [1]}, "web"],
)
def test_malformed_grant_scopes_are_refused(scopes):
    with pytest.raises(ValidationFailed):
        validate_grant_scopes(scopes)


@pytest.mark.parametrize("name", ["../x", "web\n", ""])
def test_a_name_no_source_can_have_is_not_found(name):
    with pytest.raises(NotFound):
        validate_grant_scopes({name: []})


def test_questions_are_checked_and_round_trip():
    questions = validate_questions([{"question": "Which port?", "subject": "deploy port"}])
    assert questions_from_data(questions_to_data(questions)) == questions
    for bad in ("x", [{"question": ""}], [{"question": "q", "subjects": "s"}], [{"question": "q", "x": 1}]):
        with pytest.raises(ValidationFailed):
            validate_questions(bad)


def test_a_resolves_record_is_decided_in_the_core():
    """What a resolve appends (calls, denials, the bundle, opened and closed gaps) is a pure function of the
    bundle and the task's escalations; a conflict the goal settled is not opened again."""
    from nexum.core.resolution.model import GrantedScopes, PlannedCall, SourceResult
    from tests.unit.test_resolver import item, resolve, spec

    results = [
        SourceResult.ok("repo", [item("repo", "a", "The port is 8080.", subject="port")]),
        SourceResult.ok("wiki", [item("wiki", "b", "The port is 9090.", subject="port")]),
    ]
    bundle = resolve(
        grant=GrantedScopes({"repo": ("*",), "wiki": ("*",)}),
        sources=[spec("repo"), spec("wiki")],
        results=results,
        step_inputs=("port",),
    )
    record = {
        "task_id": "t",
        "goal_id": "g",
        "resolve_id": "r",
        "query": "port",
        "calls": [PlannedCall("repo", ("*",)), PlannedCall("wiki", ("*",))],
        "results": results,
        "bundle": bundle,
        "resolved_keys": (),
        "narrowed": False,
    }
    events = resolve_events(open_by_key={"gone": "e9"}, settlements=(), **record)
    assert [type(e).__name__ for e in events] == [
        "RetrievalPerformed",
        "RetrievalPerformed",
        "BundleResolved",
        "EscalationOpened",
        "EscalationResolved",
    ]
    opened, closed = events[3], events[4]
    gap = bundle.escalations[0]
    assert opened.escalation_id == escalation_id_for(resolve_id="r", key=gap.key)
    assert events[2].escalation_ids == (opened.escalation_id,)
    assert (closed.escalation_id, closed.resolution) == ("e9", "gap_closed")
    assert all("The port is" not in str(event) for event in events)

    settled = Settlement("e1", "port", frozenset(gap.item_digests), frozenset(gap.item_digests[:1]))
    quiet = resolve_events(open_by_key={}, settlements=(settled,), **record)
    assert [type(e).__name__ for e in quiet][-1] == "BundleResolved"
