"""Budgets (SPEC B1-B5) over the physical window of O3. No database, no framework."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexum.core.catalog.budgets import (
    CONTEXT_TOKENS_FLOOR,
    ModelBudget,
    budget_for_profile,
    budget_for_ref,
    size_class_of,
)
from nexum.core.catalog.cards import BudgetOverrides, ModelCard
from nexum.core.catalog.overlays import ContextWindowOverlay, ModelCatalog
from nexum.core.errors import ValidationFailed


def card(**fields: Any) -> ModelCard:
    values: dict[str, Any] = {"word": "m", "model_id": "vendor/m", "tier": "local", "context_window": 131_072}
    values.update(fields)
    return ModelCard(**values)


# One row per rule of the budget table: (case, card fields, request overrides,
#   expected (size_class, context_tokens, tool_count, reasoning, reserve, window)).
BUDGET_TABLE: list[
    tuple[str, dict[str, Any], BudgetOverrides | None, tuple[str, int, int, str, int, int]]
] = [
    # B1/B2: size classes and their defaults
    ("quick capability", {"capabilities": ("quick",)}, None, ("small", 8_000, 6, "low", 4_096, 131_072)),
    ("latency fast", {"latency_class": "fast"}, None, ("small", 8_000, 6, "low", 4_096, 131_072)),
    (
        "quick cloud model is small",
        {"tier": "cloud", "capabilities": ("tools", "quick")},
        None,
        ("small", 8_000, 6, "low", 4_096, 131_072),
    ),
    (
        "fast cloud model is small",
        {"tier": "cloud", "latency_class": "fast"},
        None,
        ("small", 8_000, 6, "low", 4_096, 131_072),
    ),
    (
        "other local model",
        {"capabilities": ("tools",)},
        None,
        ("standard", 24_000, 12, "medium", 4_096, 131_072),
    ),
    (
        "latency match is exact",
        {"latency_class": "Fast"},
        None,
        ("standard", 24_000, 12, "medium", 4_096, 131_072),
    ),
    ("cloud tier", {"tier": "cloud"}, None, ("frontier", 48_000, 20, "high", 4_096, 131_072)),
    # B3: precedence for context tokens
    (
        "constraint beats default (tokens)",
        {"preferred_context_tokens": 16_000},
        None,
        ("standard", 16_000, 12, "medium", 4_096, 131_072),
    ),
    (
        "override beats constraint (tokens)",
        {"preferred_context_tokens": 16_000, "overrides": BudgetOverrides(context_tokens=30_000)},
        None,
        ("standard", 30_000, 12, "medium", 4_096, 131_072),
    ),
    (
        "override beats default (tokens)",
        {"overrides": BudgetOverrides(context_tokens=10_000)},
        None,
        ("standard", 10_000, 12, "medium", 4_096, 131_072),
    ),
    (
        "request override beats card override (tokens)",
        {"preferred_context_tokens": 16_000, "overrides": BudgetOverrides(context_tokens=30_000)},
        BudgetOverrides(context_tokens=5_000),
        ("standard", 5_000, 12, "medium", 4_096, 131_072),
    ),
    # B3: precedence for the tool count
    (
        "constraint beats default (tools)",
        {"max_tool_count": 3},
        None,
        ("standard", 24_000, 3, "medium", 4_096, 131_072),
    ),
    (
        "override beats constraint (tools)",
        {"max_tool_count": 3, "overrides": BudgetOverrides(tool_count=9)},
        None,
        ("standard", 24_000, 9, "medium", 4_096, 131_072),
    ),
    (
        "override beats default (tools)",
        {"tier": "cloud", "overrides": BudgetOverrides(tool_count=40)},
        None,
        ("frontier", 48_000, 40, "high", 4_096, 131_072),
    ),
    (
        "request override beats card override (tools)",
        {"max_tool_count": 3, "overrides": BudgetOverrides(tool_count=9)},
        BudgetOverrides(tool_count=1),
        ("standard", 24_000, 1, "medium", 4_096, 131_072),
    ),
    ("zero tools is allowed", {"max_tool_count": 0}, None, ("standard", 24_000, 0, "medium", 4_096, 131_072)),
    # B4: reserve = max output tokens, default 4,096
    (
        "max output tokens is the reserve",
        {"tier": "cloud", "max_output_tokens": 16_384},
        None,
        ("frontier", 48_000, 20, "high", 16_384, 131_072),
    ),
    # B4/B5: the clamp to window - reserve
    (
        "clamp: frontier on a 32K window",
        {"tier": "cloud", "context_window": 32_000, "max_output_tokens": 8_000},
        None,
        ("frontier", 24_000, 20, "high", 8_000, 32_000),
    ),
    (
        "clamp: default reserve",
        {"tier": "cloud", "context_window": 16_000},
        None,
        ("frontier", 11_904, 20, "high", 4_096, 16_000),
    ),
    (
        "clamp applies to overrides too",
        {"context_window": 16_000, "overrides": BudgetOverrides(context_tokens=100_000)},
        None,
        ("standard", 11_904, 12, "medium", 4_096, 16_000),
    ),
    (
        "clamp applies to constraints too",
        {"context_window": 16_000, "preferred_context_tokens": 100_000},
        None,
        ("standard", 11_904, 12, "medium", 4_096, 16_000),
    ),
    # B4: the reserve is capped at half the window
    (
        "reserve capped at half the window",
        {"context_window": 6_000, "max_output_tokens": 16_000, "capabilities": ("quick",)},
        None,
        ("small", 3_000, 6, "low", 3_000, 6_000),
    ),
    (
        "default reserve capped at half a 4,096 window",
        {"context_window": 4_096},
        None,
        ("standard", 2_048, 12, "medium", 2_048, 4_096),
    ),
    (
        "half of an odd window rounds down",
        {"context_window": 2_049},
        None,
        ("standard", 1_025, 12, "medium", 1_024, 2_049),
    ),
    # B4: the floor
    (
        "floor: a 2,048 window",
        {"context_window": 2_048},
        None,
        ("standard", 1_024, 12, "medium", 1_024, 2_048),
    ),
    (
        "floor outranks the clamp on a tiny window",
        {"context_window": 1_500},
        None,
        ("standard", 1_024, 12, "medium", 750, 1_500),
    ),
    (
        "floor lifts a small override",
        {"overrides": BudgetOverrides(context_tokens=500)},
        None,
        ("standard", 1_024, 12, "medium", 4_096, 131_072),
    ),
    (
        "floor lifts a small constraint",
        {"preferred_context_tokens": 200},
        None,
        ("standard", 1_024, 12, "medium", 4_096, 131_072),
    ),
    # B5: a 128K window is a ceiling, not a target
    (
        "128K window is a ceiling",
        {"context_window": 128_000, "max_output_tokens": 8_192},
        None,
        ("standard", 24_000, 12, "medium", 8_192, 128_000),
    ),
]


@pytest.mark.parametrize(
    ("fields", "request_overrides", "expected"),
    [pytest.param(fields, request, expected, id=case) for case, fields, request, expected in BUDGET_TABLE],
)
def test_budget_table(
    fields: dict[str, Any],
    request_overrides: BudgetOverrides | None,
    expected: tuple[str, int, int, str, int, int],
) -> None:
    budget = budget_for_profile(card(**fields), overrides=request_overrides)
    size_class, context_tokens, tool_count, reasoning, reserve, window = expected
    assert budget == ModelBudget(
        size_class=size_class,
        context_tokens=context_tokens,
        tool_count=tool_count,
        reasoning=reasoning,
        reserve_output_tokens=reserve,
        window=window,
    )


@pytest.mark.parametrize(
    ("fields", "size_class"),
    [
        ({"capabilities": ("quick",)}, "small"),
        ({"latency_class": "fast"}, "small"),
        ({"tier": "cloud", "capabilities": ("quick",)}, "small"),
        ({"tier": "cloud", "latency_class": "slow"}, "frontier"),
        ({"latency_class": "slow"}, "standard"),
        ({}, "standard"),
    ],
)
def test_size_class_of(fields: dict[str, Any], size_class: str) -> None:
    assert size_class_of(card(**fields)) == size_class


# --- the overlay's window (O3) feeds the budget -------------------------------------------------------------


def test_overlay_lowers_the_window_the_budget_is_clamped_to() -> None:
    budget = budget_for_profile(card(tier="cloud"), ContextWindowOverlay(context_tokens=20_000))
    assert budget.window == 20_000
    assert budget.context_tokens == 20_000 - 4_096


def test_overlay_never_raises_the_window() -> None:
    budget = budget_for_profile(card(context_window=16_000), ContextWindowOverlay(context_tokens=1_000_000))
    assert budget.window == 16_000
    assert budget.context_tokens == 16_000 - 4_096


def test_reserve_is_capped_at_half_the_overlaid_window() -> None:
    budget = budget_for_profile(card(max_output_tokens=8_000), ContextWindowOverlay(context_tokens=10_000))
    assert budget.reserve_output_tokens == 5_000
    assert budget.context_tokens == 5_000


def test_card_without_window_takes_the_overlay_number() -> None:
    budget = budget_for_profile(card(context_window=None), ContextWindowOverlay(context_tokens=12_000))
    assert budget.window == 12_000
    assert budget.context_tokens == 12_000 - 4_096


@pytest.mark.parametrize(
    "overlay", [None, ContextWindowOverlay(), ContextWindowOverlay(auto_compact_tokens=4_000, enabled=False)]
)
def test_card_without_any_window_cannot_be_budgeted(overlay: ContextWindowOverlay | None) -> None:
    with pytest.raises(ValidationFailed) as caught:
        budget_for_profile(card(word="mystery", context_window=None), overlay)
    assert caught.value.code == "model_window_unknown"
    assert caught.value.field == "context_window"
    assert "mystery" in caught.value.message


def test_compaction_members_do_not_touch_the_budget() -> None:
    plain = budget_for_profile(card())
    overlaid = budget_for_profile(card(), ContextWindowOverlay(auto_compact_tokens=2_000, enabled=False))
    assert plain == overlaid


# --- budget_for_ref: word or pinned card -------------------------------------------------------------------


def test_budget_for_ref_reads_the_overlay_of_the_word_or_its_stand_ins() -> None:
    big = card(word="local-70b", context_window=65_536)
    catalog = ModelCatalog(cards={"local-70b": big}, aliases={"standard": "local-70b"})
    settings = {"standard": ContextWindowOverlay(context_tokens=16_000)}
    assert budget_for_ref("local-70b", catalog, settings).window == 16_000
    assert budget_for_ref("standard", catalog, settings).window == 16_000
    # A pinned card is used as declared, never overlaid.
    assert budget_for_ref(big, catalog, settings).window == 65_536


def test_budget_for_ref_applies_request_overrides() -> None:
    catalog = ModelCatalog(cards={"m": card()})
    budget = budget_for_ref("m", catalog, None, overrides=BudgetOverrides(context_tokens=3_000, tool_count=2))
    assert (budget.context_tokens, budget.tool_count) == (3_000, 2)


def test_budget_for_ref_refuses_an_unknown_word() -> None:
    with pytest.raises(ValidationFailed) as caught:
        budget_for_ref("nope", ModelCatalog(cards={"m": card()}), None)
    assert caught.value.code == "unknown_model_word"


# --- card validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field_at_fault"),
    [
        ({"word": ""}, "word"),
        ({"word": "  "}, "word"),
        ({"word": None}, "word"),
        ({"model_id": ""}, "model_id"),
        ({"tier": "edge"}, "tier"),
        ({"context_window": 0}, "context_window"),
        ({"context_window": -1}, "context_window"),
        ({"context_window": 8_000.0}, "context_window"),
        ({"context_window": "8k"}, "context_window"),
        ({"context_window": True}, "context_window"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"preferred_context_tokens": 0}, "preferred_context_tokens"),
        ({"preferred_context_tokens": 3.5}, "preferred_context_tokens"),
        ({"max_tool_count": -1}, "max_tool_count"),
        ({"max_tool_count": False}, "max_tool_count"),
        ({"capabilities": "quick"}, "capabilities"),
        ({"capabilities": ("quick", "")}, "capabilities"),
        ({"capabilities": 3}, "capabilities"),
        ({"latency_class": ""}, "latency_class"),
        ({"encoding": ""}, "encoding"),
        ({"overrides": {"context_tokens": 10}}, "overrides"),
    ],
)
def test_card_validation_names_the_field(fields: dict[str, Any], field_at_fault: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        card(**fields)
    assert caught.value.field == field_at_fault
    assert field_at_fault in caught.value.message


@pytest.mark.parametrize(
    ("fields", "field_at_fault"),
    [
        ({"context_tokens": 0}, "context_tokens"),
        ({"context_tokens": 3.5}, "context_tokens"),
        ({"tool_count": -2}, "tool_count"),
        ({"tool_count": True}, "tool_count"),
    ],
)
def test_override_validation_names_the_field(fields: dict[str, Any], field_at_fault: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        BudgetOverrides(**fields)
    assert caught.value.field == field_at_fault


def test_card_accepts_capabilities_as_a_list_and_stores_a_tuple() -> None:
    assert card(capabilities=["quick", "tools"]).capabilities == ("quick", "tools")


def test_card_is_frozen_and_hashable() -> None:
    quick = card(capabilities=("quick",))
    with pytest.raises(AttributeError):
        quick.context_window = 1  # type: ignore[misc]
    assert hash(quick) == hash(card(capabilities=("quick",)))


# --- properties ---------------------------------------------------------------------------------------------

optional_positive = st.none() | st.integers(min_value=1, max_value=2_000_000)
cards = st.builds(
    ModelCard,
    word=st.just("m"),
    model_id=st.just("vendor/m"),
    tier=st.sampled_from(["local", "cloud"]),
    context_window=optional_positive,
    max_output_tokens=optional_positive,
    capabilities=st.lists(st.sampled_from(["quick", "tools", "vision"]), max_size=3).map(tuple),
    latency_class=st.none() | st.sampled_from(["fast", "medium", "slow"]),
    preferred_context_tokens=optional_positive,
    max_tool_count=st.none() | st.integers(min_value=0, max_value=100),
    overrides=st.builds(
        BudgetOverrides,
        context_tokens=optional_positive,
        tool_count=st.none() | st.integers(min_value=0, max_value=100),
    ),
)
overlays = st.none() | st.builds(
    ContextWindowOverlay,
    context_tokens=optional_positive,
    auto_compact_tokens=optional_positive,
    enabled=st.none() | st.booleans(),
)


@given(model=cards, overlay=overlays)
def test_budget_stays_inside_the_physical_window(
    model: ModelCard, overlay: ContextWindowOverlay | None
) -> None:
    """Always ≥ 1,024; ≤ window - reserve whenever window - reserve ≥ 1,024, else exactly 1,024; the reserve
    never exceeds half the window; an overlay never raises the window."""
    declared = overlay.context_tokens if overlay else None
    if model.context_window is None and declared is None:
        with pytest.raises(ValidationFailed):
            budget_for_profile(model, overlay)
        return
    budget = budget_for_profile(model, overlay)
    room = budget.window - budget.reserve_output_tokens
    assert budget.context_tokens >= CONTEXT_TOKENS_FLOOR
    if room >= CONTEXT_TOKENS_FLOOR:
        assert budget.context_tokens <= room
    else:
        assert budget.context_tokens == CONTEXT_TOKENS_FLOOR
    assert budget.reserve_output_tokens <= budget.window // 2
    if model.context_window is not None:
        assert budget.window <= model.context_window
    if declared is not None:
        assert budget.window <= declared
    assert budget.tool_count >= 0
    # Deterministic: same input, same budget.
    assert budget_for_profile(model, overlay) == budget


@given(model=cards, overlay=overlays)
def test_an_overlay_never_widens_the_budget(model: ModelCard, overlay: ContextWindowOverlay | None) -> None:
    if model.context_window is None:
        return
    assert budget_for_profile(model, overlay).context_tokens <= budget_for_profile(model).context_tokens


def test_core_budget_modules_import_no_framework() -> None:
    code = (
        "import sys, nexum.core.catalog.budgets, nexum.core.catalog.overlays\n"
        "bad = [m for m in ('django', 'rest_framework', 'celery', 'tiktoken') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
