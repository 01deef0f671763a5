"""Roles (nexum/core/roles.py): what needs an operator, and the trust a caller's word can carry."""

from __future__ import annotations

import pytest

from nexum.core.errors import Forbidden, ValidationFailed
from nexum.core.roles import (
    AGENT,
    OPERATOR,
    actor_of,
    caller_trust,
    content_ceiling,
    require_operator,
    trust_ceiling,
    validate_role,
)
from nexum.core.trust import TrustClass, is_authoritative


def test_roles_are_checked_and_name_the_actor():
    assert validate_role("operator") == OPERATOR
    assert (actor_of(AGENT, "bot"), actor_of(OPERATOR, "alice")) == ("agent:bot", "operator:alice")
    for bad in ("planner", "", None, "AGENT"):
        with pytest.raises(ValidationFailed) as error:
            validate_role(bad)
        assert (error.value.code, error.value.field) == ("invalid_role", "role")


def test_only_an_operator_passes_require_operator():
    require_operator(OPERATOR, "issuing a grant")
    with pytest.raises(Forbidden) as error:
        require_operator(AGENT, "issuing a grant", field="sources")
    assert (error.value.code, error.value.kind, error.value.field) == ("forbidden", "forbidden", "sources")
    assert error.value.message.startswith("issuing a grant needs an operator token")
    assert error.value.details == {"role": "agent", "needs": "operator", "action": "issuing a grant"}


def test_ceilings_sit_below_authority_for_agents_and_at_it_for_operators():
    assert trust_ceiling(AGENT) is TrustClass.agent_reported
    assert trust_ceiling(OPERATOR) is TrustClass.repository_authored
    assert not is_authoritative(trust_ceiling(AGENT))
    assert TrustClass.untrusted_retrieved < trust_ceiling(AGENT) < TrustClass.repository_authored


@pytest.mark.parametrize("role", [AGENT, OPERATOR])
def test_a_caller_gets_its_ceiling_by_default_and_may_claim_lower(role):
    assert caller_trust(None, role=role) is trust_ceiling(role)
    assert caller_trust("untrusted_retrieved", role=role) is TrustClass.untrusted_retrieved
    assert caller_trust(trust_ceiling(role).name, role=role) is trust_ceiling(role)


@pytest.mark.parametrize(
    ("role", "claimed"),
    [
        (AGENT, "repository_authored"),
        (AGENT, "kernel"),
        (OPERATOR, "signed_skill"),
        (OPERATOR, "signed_policy"),
        (OPERATOR, "kernel"),
    ],
)
def test_a_claim_above_the_ceiling_is_refused_naming_the_field(role, claimed):
    with pytest.raises(Forbidden) as error:
        caller_trust(claimed, role=role, field="evidence.trust_class")
    assert error.value.field == "evidence.trust_class"
    assert error.value.details == {"role": role, "ceiling": trust_ceiling(role).name, "claimed": claimed}


def test_an_unknown_class_is_bad_input_not_a_refusal():
    with pytest.raises(ValidationFailed) as error:
        caller_trust("trusted", role=OPERATOR)
    assert error.value.field == "trust_class" and not isinstance(error.value, Forbidden)


def test_what_the_agent_can_write_is_at_most_agent_reported_an_operators_is_bounded_by_its_source():
    assert content_ceiling(AGENT) is TrustClass.agent_reported
    assert content_ceiling(OPERATOR) is TrustClass.kernel  # the source's own class and signatures decide
    with pytest.raises(ValidationFailed) as error:
        content_ceiling("anyone")
    assert error.value.field == "writable_by"
