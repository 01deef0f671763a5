"""The approval rules (issue 28 item 4) without a database: which stages a task waits at, what a contract
may say, and what the gate answers for each state of the latest approval."""

from __future__ import annotations

import pytest

from nexum.core.errors import ValidationFailed
from nexum.core.verification.approvals import (
    ApprovalRequired,
    ApprovalView,
    ApprovalWasDenied,
    decide_gate,
    gate_approval_id,
    required_stages,
)
from nexum.core.verification.gate import contract_from_dict, contract_to_dict


@pytest.mark.parametrize(
    ("contract_approval", "risk", "default", "stages"),
    [
        (None, "high", "before_start", {"before_start"}),
        (None, "medium", "before_start", set()),
        (None, "high", None, set()),
        ("before_complete", "low", None, {"before_complete"}),
        ("before_complete", "high", "before_start", {"before_complete"}),
        ("none", "high", "before_start", set()),
    ],
)
def test_the_contract_decides_else_the_projects_default_for_high_risk(
    contract_approval, risk, default, stages
):
    assert (
        required_stages(contract_approval=contract_approval, risk=risk, high_risk_default=default) == stages
    )


def test_a_contract_records_its_approval_only_when_it_has_one():
    assert "approval" not in contract_to_dict(contract_from_dict({"checks": []}))
    assert contract_to_dict(contract_from_dict({"approval": "before_start"}))["approval"] == "before_start"
    with pytest.raises(ValidationFailed) as refused:
        contract_from_dict({"approval": "after_lunch"})
    assert refused.value.field == "approval"


def test_the_gate_passes_a_grant_and_refuses_pending_or_denied_naming_the_approval():
    decide_gate(action="start", task_key="deploy", latest=ApprovalView("a1", "granted", "ok"))
    with pytest.raises(ApprovalRequired) as pending:
        decide_gate(action="start", task_key="deploy", latest=ApprovalView("a1", "pending", ""))
    assert pending.value.details == {"approval_id": "a1", "action": "start"}
    with pytest.raises(ApprovalWasDenied) as denied:
        decide_gate(action="complete", task_key="deploy", latest=ApprovalView("a2", "denied", "not today"))
    assert denied.value.details["reason"] == "not today" and "not today" in denied.value.message


def test_the_gate_asks_once_per_task_action_and_attempt():
    assert gate_approval_id("t", "start", 1) == gate_approval_id("t", "start", 1)
    assert (
        len(
            {
                gate_approval_id("t", "start", 1),
                gate_approval_id("t", "start", 2),
                gate_approval_id("t", "complete", 1),
            }
        )
        == 3
    )
