"""The context-quality yardstick itself (bench/context_quality.py): its measures on a hand-made example, the
dataset's rules, and the committed dataset's size, so a bug in the benchmark is caught before it misleads."""

from __future__ import annotations

import json

import pytest

from bench.context_quality import Selection, first_fit, main, quality, reciprocal_rank_fusion
from bench.context_quality_data import (
    DatasetError,
    Fact,
    Scenario,
    distractor_facts,
    load_scenarios,
    scenario_from,
)


def scenario(name: str, kinds: list[str], traps: int) -> Scenario:
    return Scenario(
        id=name,
        domain="test",
        objective="rotate the key",
        inputs=(),
        constraints=(),
        success_criteria=(),
        needed=tuple(Fact(f"{name}/n{i}", "s", "t", kind) for i, kind in enumerate(kinds)),
        traps=tuple(Fact(f"{name}/t{i}", "s", "t") for i in range(traps)),
    )


TOKENS = {"a/n0": 10, "a/n1": 20, "a/t0": 30, "d/1": 40, "b/n0": 5, "b/n1": 5, "b/n2": 5, "b/t0": 50}


def test_recall_overall_and_per_kind_complete_steps_traps_and_unrelated_share():
    a = scenario("a", ["shared_words", "other_wording"], traps=1)
    b = scenario("b", ["shared_words", "entity_hop", "with_another"], traps=1)
    measured = quality(
        [a, b],
        {
            # a: both needed facts, its trap and a distractor; b: one of three needed facts, no trap
            "a": Selection(("a/n0", "a/n1", "a/t0", "d/1"), prompt_tokens=500),
            "b": Selection(("b/n0", "a/t0"), prompt_tokens=300),
        },
        TOKENS.__getitem__,
    )
    assert measured.steps == 2
    assert measured.needed == 5
    assert measured.recall == pytest.approx(3 / 5)
    assert measured.recall_by_kind == {
        "shared_words": 1.0,
        "other_wording": 1.0,
        "entity_hop": 0.0,
        "with_another": 0.0,
    }
    assert measured.steps_complete == 1
    assert measured.trap_rate == pytest.approx(1 / 2)  # a's trap is only unrelated for b, not b's trap
    # a: 30 + 40 of 100 tokens unrelated; b: 30 of 35 (a's trap is unrelated to b)
    assert measured.unrelated_share == pytest.approx((70 + 30) / (100 + 35))
    assert measured.fact_tokens == pytest.approx(135 / 2)
    assert measured.prompt_tokens == pytest.approx(400)


def test_a_kind_no_scenario_has_is_left_out_not_reported_as_zero():
    measured = quality([scenario("a", ["shared_words"], 1)], {"a": Selection(())}, TOKENS.__getitem__)
    assert measured.recall_by_kind == {"shared_words": 0.0}
    assert measured.unrelated_share == 0.0
    assert measured.prompt_tokens is None  # a baseline's selection is no compile


def test_first_fit_skips_what_does_not_fit_and_tries_the_next():
    costs = {"x": 6, "y": 5, "z": 3, "w": 1}
    assert first_fit(["x", "y", "z", "w"], costs, 10) == ("x", "z", "w")
    assert first_fit(["x"], costs, 5) == ()


def test_reciprocal_rank_fusion_rewards_agreement_and_breaks_ties_by_id():
    # b is second in both; a and d are first in one and low in the other
    assert reciprocal_rank_fusion([["a", "b", "c", "d", "e"], ["d", "b", "e", "c", "a"]], k=60)[0] == "b"
    assert reciprocal_rank_fusion([["b", "a"], ["a", "b"]]) == ["a", "b"]


SCENARIO = {
    "id": "x-01",
    "objective": "Rotate the session signing key",
    "inputs": ["app/session.py"],
    "needed": [
        {
            "kind": "shared_words",
            "subject": "signing",
            "text": "session.py signs with KEY_ID from the keyring.",
        },
        {"kind": "other_wording", "subject": "cookies", "text": "Browser cookies live fourteen days."},
        {"kind": "entity_hop", "via": "KEY_ID", "subject": "vault", "text": "KEY_ID is read from Vault."},
        {"kind": "with_another", "with": 2, "subject": "reload", "text": "Vault changes need a SIGHUP."},
    ],
    "traps": [{"subject": "api signing", "text": "Webhook signing uses another secret."}],
}


def test_a_valid_scenario_loads():
    loaded = scenario_from(SCENARIO, "test")
    assert [fact.kind for fact in loaded.needed] == [
        "shared_words",
        "other_wording",
        "entity_hop",
        "with_another",
    ]
    assert [fact.key for fact in loaded.traps] == ["x-01/t0"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"needed": [{"kind": "guess", "subject": "a", "text": "session"}]}, "kind 'guess'"),
        ({"needed": [{"kind": "other_wording", "subject": "a", "text": "Signing keys"}]}, "shares ['sign"),
        (
            {"needed": [{"kind": "shared_words", "subject": "a", "text": "Cookies expire."}]},
            "shares no content",
        ),
        ({"needed": [{"kind": "entity_hop", "via": "NOPE", "subject": "a", "text": "NOPE"}]}, "'via'"),
        ({"needed": [{"kind": "with_another", "with": 0, "subject": "a", "text": "session"}]}, "'with'"),
        ({"traps": []}, "1 to 3 traps"),
        ({"traps": [{"subject": "weather", "text": "It rains in Berlin."}]}, "no look-alike"),
        ({"needed": []}, "at least one fact"),
    ],
)
def test_a_scenario_that_breaks_a_rule_is_refused_naming_it(change, message):
    with pytest.raises(DatasetError, match=r"scenario x-01 \(test\): .*") as refused:
        scenario_from({**SCENARIO, **change}, "test")
    assert message in str(refused.value)


def test_a_scenario_id_used_twice_is_refused(tmp_path):
    (tmp_path / "one.json").write_text(json.dumps([SCENARIO]))
    (tmp_path / "two.json").write_text(json.dumps([SCENARIO]))
    with pytest.raises(DatasetError, match="x-01 is used twice"):
        load_scenarios(tmp_path)


def test_the_committed_dataset_has_the_size_and_kinds_the_benchmark_promises():
    scenarios = load_scenarios()
    assert len(scenarios) >= 50
    assert len({s.domain for s in scenarios}) >= 10
    kinds = {fact.kind for s in scenarios for fact in s.needed}
    assert kinds == {"shared_words", "other_wording", "entity_hop", "with_another"}
    assert all(1 <= len(s.traps) <= 3 for s in scenarios)
    assert sum(len(s.needed) for s in scenarios) >= 4 * len(scenarios)


def test_distractors_are_the_same_for_a_seed_and_differ_for_another():
    assert distractor_facts(50, seed=1) == distractor_facts(50, seed=1)
    assert distractor_facts(50, seed=1) != distractor_facts(50, seed=2)
    assert len({fact.key for fact in distractor_facts(500)}) == 500


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model-words", "huge"], "--model-words: unknown huge; the catalog's are quick, local, frontier"),
        (["--model-words", ","], "--model-words: unknown (none given)"),
        (["--scale", "-1"], "--scale is 0 or more and --slice 1 or more"),
        (["--slice", "0"], "--scale is 0 or more and --slice 1 or more"),
    ],
)
def test_bad_options_are_refused_before_anything_is_loaded(arguments, message, capsys):
    with pytest.raises(SystemExit) as refused:
        main(arguments)
    assert refused.value.code == 2
    assert message in capsys.readouterr().err
