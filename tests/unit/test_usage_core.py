"""The usage ledger's rules without Django (issue 28): drift, nearest-rank percentiles, the checks of what a
report carries, and a card's safety margin in its budget."""

from __future__ import annotations

import pytest

from nexum.core.catalog.budgets import budget_for_profile
from nexum.core.catalog.cards import ModelCard
from nexum.core.catalog.usage import (
    drift,
    percentile,
    summarize_drift,
    validate_cost,
    validate_name,
    validate_token_count,
)
from nexum.core.errors import ValidationFailed


def test_drift_is_the_providers_excess_over_nexums_count():
    assert drift(1100, 1000) == 0.1
    assert drift(950, 1000) == -0.05
    assert drift(10, 0) is None


def test_percentiles_are_nearest_rank_values_some_call_had():
    values = [0.01, 0.02, 0.10]
    assert (percentile(values, 50), percentile(values, 95)) == (0.02, 0.10)
    twenty = [n / 100 for n in range(1, 21)]
    assert (percentile(twenty, 50), percentile(twenty, 95)) == (0.10, 0.19)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_a_summary_sums_both_counts_and_skips_calls_without_a_drift():
    summary = summarize_drift([(1000, 1100), (1000, 1000), (0, 40), (2000, 2300)])
    assert summary is not None
    assert (summary.reports, summary.p50, summary.p95) == (3, 0.1, 0.15)
    assert (summary.nexum_tokens, summary.provider_tokens) == (4000, 4440)
    assert summary.over(0.1) and not summary.over(0.15)
    assert summarize_drift([(0, 5)]) is None


@pytest.mark.parametrize("value", [-1, 2**31, 1.5, True, "10", None])
def test_token_counts_are_integers_within_bounds(value):
    with pytest.raises(ValidationFailed) as refused:
        validate_token_count(value, "prompt_tokens")
    assert refused.value.field == "prompt_tokens"


def test_names_are_trimmed_and_bounded():
    assert validate_name("  openai ", "provider") == "openai"
    assert validate_name("vllm\tlocal", "provider") == "vllm\tlocal"
    for bad in ("", "   ", "x" * 201, "nul\x00", 3):
        with pytest.raises(ValidationFailed):
            validate_name(bad, "model")


def test_cost_is_kept_as_canonical_decimal_text():
    assert validate_cost(None) is None
    assert validate_cost(0.0125) == "0.0125"
    assert validate_cost(3) == "3"
    assert validate_cost("1.50") == "1.5"
    assert validate_cost(0.123456789012) == "0.123456789"  # kept to 10 places
    assert validate_cost("0.00000000001") == "0" and validate_cost(1e12) == "1000000000000"
    for bad in (-0.01, "nan", "Infinity", 1.5e12, "abc", True, [1]):
        with pytest.raises(ValidationFailed) as refused:
            validate_cost(bad)
        assert refused.value.field == "cost"


def card(**members) -> ModelCard:
    shape = {"context_window": 10_000, "max_output_tokens": 1_000, "preferred_context_tokens": 9_000}
    return ModelCard(word="tight", model_id="m", tier="local", **{**shape, **members})


def test_a_safety_margin_lowers_the_clamp_by_its_tokens_or_its_percent_of_the_usable_window():
    plain = budget_for_profile(card())
    assert (plain.context_tokens, plain.safety_margin_tokens) == (9_000, 0)
    assert "safety_margin_tokens" not in plain.as_data()  # the form budgets had before margins
    tokens = budget_for_profile(card(safety_margin_tokens=700))
    assert (tokens.context_tokens, tokens.safety_margin_tokens) == (8_300, 700)
    assert tokens.as_data()["safety_margin_tokens"] == 700
    percent = budget_for_profile(card(safety_margin_percent=7))  # 7 % of 9,000 usable = 630
    assert (percent.context_tokens, percent.safety_margin_tokens) == (8_370, 630)
    rounded_up = budget_for_profile(card(safety_margin_percent=1, context_window=10_001))  # 90.01 → 91
    assert rounded_up.safety_margin_tokens == 91


def test_a_margin_below_the_wanted_size_reserves_nothing_from_it_and_the_floor_still_holds():
    roomy = budget_for_profile(card(preferred_context_tokens=4_000, safety_margin_percent=10))
    assert (roomy.context_tokens, roomy.safety_margin_tokens) == (4_000, 900)
    whole = budget_for_profile(card(safety_margin_tokens=50_000))
    assert (whole.context_tokens, whole.safety_margin_tokens) == (1_024, 9_000)


@pytest.mark.parametrize(
    ("members", "field"),
    [
        ({"safety_margin_percent": 91}, "safety_margin_percent"),
        ({"safety_margin_tokens": -1}, "safety_margin_tokens"),
        ({"safety_margin_tokens": 1, "safety_margin_percent": 1}, "safety_margin_percent"),
    ],
)
def test_a_bad_margin_is_refused_naming_it(members, field):
    with pytest.raises(ValidationFailed) as refused:
        card(**members)
    assert refused.value.field == field
