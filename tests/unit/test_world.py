"""World-state rules without a database: rendered texts, relevance terms, fact transitions, tool narrowing."""

from __future__ import annotations

import pytest

from nexum.core.errors import Forbidden, IllegalTransition, ValidationFailed
from nexum.core.trust import TrustClass
from nexum.core.world.items import (
    FACT_CURRENT,
    FACT_RETRACTED,
    FACT_SUPERSEDED,
    MAX_TERMS,
    FactState,
    FactVerified,
    decide_retract,
    decide_supersede,
    decide_verify,
    effective_tools,
    item_terms,
    render_artifact,
    render_decision,
    render_fact,
    render_failure,
    render_item,
    render_progress,
    render_tool,
    render_tool_call,
    token_counts,
    validate_tool_name,
)

AGENT, OPERATOR = TrustClass.agent_reported, TrustClass.repository_authored


def test_rendered_texts_are_the_documented_ones():
    assert render_fact("Postgres is 16", subject="db", source="psql") == "db: Postgres is 16 (source: psql)"
    assert render_fact("plain") == "plain"
    assert render_decision("Use UUIDs", rationale="merging") == "Use UUIDs\nRationale: merging"
    assert render_failure("tests failed", attempt=2) == "Attempt 2: tests failed"
    assert render_failure("tests failed") == "tests failed"
    assert render_artifact(
        uri="file:a.py", summary="module", excerpt="x = 1", media_type="text/x-python"
    ) == ("file:a.py (text/x-python): module\nExcerpt:\nx = 1")
    assert render_artifact(uri="", summary="notes") == "artifact: notes"
    assert render_progress("halfway") == "halfway"
    digest = "ab" * 32
    assert render_tool_call(tool="grep", arguments_digest=digest, result_summary="3 hits") == (
        f"Called grep (arguments {digest[:12]}): 3 hits"
    )
    assert render_tool(name="t", description="d", schema={"b": 1, "a": 2}) == (
        '{"description":"d","name":"t","schema":{"a":2,"b":1}}'
    )


def test_render_item_matches_the_kind_renderers():
    assert render_item("fact", {"text": "x", "subject": "s", "source": ""}) == "s: x"
    assert render_item("failure", {"text": "x", "attempt": 3}) == "Attempt 3: x"
    assert render_item("tool_call", {"text": "ok", "tool": "ls", "arguments_digest": "0" * 64}).startswith(
        "Called ls"
    )
    with pytest.raises(ValidationFailed) as error:
        render_item("rumour", {"text": "x"})
    assert error.value.field == "kind"


def test_terms_keep_the_subject_then_the_first_words():
    terms = item_terms("Database version", "the server runs " + "word " * 100)
    assert terms[:5] == ("database", "version", "the", "server", "runs")
    assert len(terms) == MAX_TERMS


class FakeCounter:
    def __init__(self, encoding: str) -> None:
        self.encoding = encoding

    def count(self, text: str) -> int:
        return len(text.split())


def test_token_counts_per_encoding_sorted():
    counts = token_counts("a b c", [FakeCounter("z"), FakeCounter("a")])
    assert list(counts.items()) == [("a", 3), ("z", 3)]


def test_fact_transitions():
    current = FactState("f1", FACT_CURRENT, verified=False, trust_class=AGENT)
    (verified,) = decide_verify(current, note="checked")
    assert isinstance(verified, FactVerified)
    with pytest.raises(IllegalTransition):
        decide_verify(FactState("f1", FACT_CURRENT, True, AGENT), note="")
    for status in (FACT_SUPERSEDED, FACT_RETRACTED):
        gone = FactState("f1", status, verified=False, trust_class=AGENT)
        for decide in (
            lambda fact: decide_verify(fact, note=""),
            lambda fact: decide_retract(fact, reason="wrong", ceiling=AGENT),
            lambda fact: decide_supersede(fact, new_fact_id="f2", reason="", ceiling=AGENT),
        ):
            with pytest.raises(IllegalTransition):
                decide(gone)
    with pytest.raises(ValidationFailed) as error:
        decide_retract(current, reason="  ", ceiling=AGENT)
    assert error.value.field == "reason"
    with pytest.raises(ValidationFailed):
        decide_supersede(current, new_fact_id="f1", reason="", ceiling=AGENT)


def test_a_fact_above_the_callers_ceiling_is_neither_retracted_nor_superseded():
    operators = FactState("f1", FACT_CURRENT, verified=True, trust_class=OPERATOR)
    for decide in (
        lambda ceiling: decide_retract(operators, reason="wrong", ceiling=ceiling),
        lambda ceiling: decide_supersede(operators, new_fact_id="f2", reason="", ceiling=ceiling),
    ):
        with pytest.raises(Forbidden) as refused:
            decide(AGENT)
        assert refused.value.field == "trust_class"
        assert refused.value.details["trust_class"] == "repository_authored"
        assert refused.value.details["ceiling"] == "agent_reported"
        assert len(decide(OPERATOR)) == 1


def test_effective_tools_narrow_then_pin():
    registry = [("a", False), ("b", True), ("c", False)]
    assert effective_tools(registry, []) == registry
    goal = (["a", "b"], [])
    task = (None, ["a"])
    assert effective_tools(registry, [goal, task]) == [("a", True), ("b", True)]
    assert effective_tools(registry, [goal, (["b"], [])]) == [("b", True)]
    # a pin outside what is allowed exposes nothing
    assert effective_tools(registry, [(["a"], ["c"])]) == [("a", False)]


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "semi;colon"])
def test_bad_tool_names(name):
    with pytest.raises(ValidationFailed) as error:
        validate_tool_name(name)
    assert error.value.field == "name"
