"""World-state rules without a database: rendered texts, relevance terms, fact transitions, tool narrowing."""

from __future__ import annotations

import pytest

from nexum.core import world
from nexum.core.errors import Forbidden, IllegalTransition, ValidationFailed
from nexum.core.trust import TrustClass

AGENT, OPERATOR = TrustClass.agent_reported, TrustClass.repository_authored


def test_rendered_texts_are_the_documented_ones():
    assert (
        world.render_fact("Postgres is 16", subject="db", source="psql")
        == "db: Postgres is 16 (source: psql)"
    )
    assert world.render_fact("plain") == "plain"
    assert world.render_decision("Use UUIDs", rationale="merging") == "Use UUIDs\nRationale: merging"
    assert world.render_failure("tests failed", attempt=2) == "Attempt 2: tests failed"
    assert world.render_failure("tests failed") == "tests failed"
    assert world.render_artifact(
        uri="file:a.py", summary="module", excerpt="x = 1", media_type="text/x-python"
    ) == ("file:a.py (text/x-python): module\nExcerpt:\nx = 1")
    assert world.render_artifact(uri="", summary="notes") == "artifact: notes"
    assert world.render_progress("halfway") == "halfway"
    digest = "ab" * 32
    assert world.render_tool_call(tool="grep", arguments_digest=digest, result_summary="3 hits") == (
        f"Called grep (arguments {digest[:12]}): 3 hits"
    )
    assert world.render_tool(name="t", description="d", schema={"b": 1, "a": 2}) == (
        '{"description":"d","name":"t","schema":{"a":2,"b":1}}'
    )


def test_render_item_matches_the_kind_renderers():
    assert world.render_item("fact", {"text": "x", "subject": "s", "source": ""}) == "s: x"
    assert world.render_item("failure", {"text": "x", "attempt": 3}) == "Attempt 3: x"
    assert world.render_item(
        "tool_call", {"text": "ok", "tool": "ls", "arguments_digest": "0" * 64}
    ).startswith("Called ls")
    with pytest.raises(ValidationFailed) as error:
        world.render_item("rumour", {"text": "x"})
    assert error.value.field == "kind"


def test_terms_keep_the_subject_then_the_first_words():
    terms = world.item_terms("Database version", "the server runs " + "word " * 100)
    assert terms[:5] == ("database", "version", "the", "server", "runs")
    assert len(terms) == world.MAX_TERMS


class FakeCounter:
    def __init__(self, encoding: str) -> None:
        self.encoding = encoding

    def count(self, text: str) -> int:
        return len(text.split())


def test_token_counts_per_encoding_sorted():
    counts = world.token_counts("a b c", [FakeCounter("z"), FakeCounter("a")])
    assert list(counts.items()) == [("a", 3), ("z", 3)]


def test_fact_transitions():
    current = world.FactState("f1", world.FACT_CURRENT, verified=False, trust_class=AGENT)
    (verified,) = world.decide_verify(current, note="checked")
    assert isinstance(verified, world.FactVerified)
    with pytest.raises(IllegalTransition):
        world.decide_verify(world.FactState("f1", world.FACT_CURRENT, True, AGENT), note="")
    for status in (world.FACT_SUPERSEDED, world.FACT_RETRACTED):
        gone = world.FactState("f1", status, verified=False, trust_class=AGENT)
        for decide in (
            lambda fact: world.decide_verify(fact, note=""),
            lambda fact: world.decide_retract(fact, reason="wrong", ceiling=AGENT),
            lambda fact: world.decide_supersede(fact, new_fact_id="f2", reason="", ceiling=AGENT),
        ):
            with pytest.raises(IllegalTransition):
                decide(gone)
    with pytest.raises(ValidationFailed) as error:
        world.decide_retract(current, reason="  ", ceiling=AGENT)
    assert error.value.field == "reason"
    with pytest.raises(ValidationFailed):
        world.decide_supersede(current, new_fact_id="f1", reason="", ceiling=AGENT)


def test_a_fact_above_the_callers_ceiling_is_neither_retracted_nor_superseded():
    operators = world.FactState("f1", world.FACT_CURRENT, verified=True, trust_class=OPERATOR)
    for decide in (
        lambda ceiling: world.decide_retract(operators, reason="wrong", ceiling=ceiling),
        lambda ceiling: world.decide_supersede(operators, new_fact_id="f2", reason="", ceiling=ceiling),
    ):
        with pytest.raises(Forbidden) as refused:
            decide(AGENT)
        assert refused.value.field == "trust_class"
        assert refused.value.details["trust_class"] == "repository_authored"
        assert refused.value.details["ceiling"] == "agent_reported"
        assert len(decide(OPERATOR)) == 1


def test_effective_tools_narrow_then_pin():
    registry = [("a", False), ("b", True), ("c", False)]
    assert world.effective_tools(registry, []) == registry
    goal = (["a", "b"], [])
    task = (None, ["a"])
    assert world.effective_tools(registry, [goal, task]) == [("a", True), ("b", True)]
    assert world.effective_tools(registry, [goal, (["b"], [])]) == [("b", True)]
    # a pin outside what is allowed exposes nothing
    assert world.effective_tools(registry, [(["a"], ["c"])]) == [("a", False)]


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "semi;colon"])
def test_bad_tool_names(name):
    with pytest.raises(ValidationFailed) as error:
        world.check_tool_name(name)
    assert error.value.field == "name"
