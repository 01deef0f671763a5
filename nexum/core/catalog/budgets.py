"""The budget each model card gets (SPEC B1-B5, with the live overlay of O3).

Rules this module settles where the spec is silent:

* The 1,024-token floor outranks the clamp: when ``window - reserve`` is below 1,024 the budget is
  exactly 1,024 (so it can exceed ``window - reserve`` only then). The floor also lifts overrides and
  constraints below 1,024.
* A model whose window is unknown (no card window and no overlay ``context_tokens``) cannot be budgeted:
  ``budget_for_profile`` raises ``ValidationFailed`` (code ``model_window_unknown``) rather than invent
  a window, because every later check (request guard, compaction trigger) measures against
  ``ModelBudget.window``.
* Tool counts may be 0 (a model without tool use); token numbers must be positive.
* Request-time overrides (``overrides=``) outrank the card's own overrides, member by member.
* The tool count is not clamped by the window; the compiler charges tool schemas to the token budget (C2).
* A card's safety margin (issue 28: ``safety_margin_tokens``, or ``safety_margin_percent`` of
  ``window - reserve``; at most one of the two) is held back from the window for what Nexum's tokenizer does
  not see (the provider's chat template, system prompt and tokenizer): the context budget is clamped to
  ``window - reserve - margin`` (the floor still outranks it). The budget says how many tokens it reserved
  (``safety_margin_tokens``); a budget without a margin keeps the form it always had (``as_data``), so the
  digests of contexts compiled before margins existed replay unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from nexum.core.catalog.cards import BudgetOverrides, ModelCard
from nexum.core.catalog.overlays import (
    ContextWindowOverlay,
    ModelCatalog,
    overlay_for,
    physical_window_of,
)
from nexum.core.errors import ValidationFailed

SMALL = "small"
STANDARD = "standard"
FRONTIER = "frontier"

QUICK_CAPABILITY = "quick"
FAST_LATENCY = "fast"

DEFAULT_RESERVE_OUTPUT_TOKENS = 4_096
CONTEXT_TOKENS_FLOOR = 1_024


@dataclass(frozen=True)
class SizeClassDefaults:
    context_tokens: int
    tool_count: int
    reasoning: str


SIZE_CLASS_DEFAULTS: Mapping[str, SizeClassDefaults] = {
    SMALL: SizeClassDefaults(context_tokens=8_000, tool_count=6, reasoning="low"),
    STANDARD: SizeClassDefaults(context_tokens=24_000, tool_count=12, reasoning="medium"),
    FRONTIER: SizeClassDefaults(context_tokens=48_000, tool_count=20, reasoning="high"),
}


@dataclass(frozen=True)
class ModelBudget:
    """What one model call may use.

    ``context_tokens`` is the token budget of the compiled context (prompt block plus charged tool schemas);
    ``tool_count`` caps the tools exposed; ``reserve_output_tokens`` is held back for the answer;
    ``window`` is the physical window after any overlay; ``safety_margin_tokens`` is what the card's safety
    margin held back from the window.
    """

    size_class: str
    context_tokens: int
    tool_count: int
    reasoning: str
    reserve_output_tokens: int
    window: int
    safety_margin_tokens: int = 0

    def as_data(self) -> dict[str, object]:
        """The budget as compiles record it and digests cover: without a margin, exactly the members a budget
        had before margins existed (a replay of an old context rebuilds the same form)."""
        data: dict[str, object] = dataclasses.asdict(self)
        if not self.safety_margin_tokens:
            del data["safety_margin_tokens"]
        return data


def size_class_of(card: ModelCard) -> str:
    """B1: ``small`` for the ``quick`` capability or latency class ``fast``; else ``frontier`` on the cloud
    tier; else ``standard``. Matching is exact (case-sensitive)."""
    if QUICK_CAPABILITY in card.capabilities or card.latency_class == FAST_LATENCY:
        return SMALL
    if card.tier == "cloud":
        return FRONTIER
    return STANDARD


def _first_declared(*values: int | None) -> int | None:
    return next((value for value in values if value is not None), None)


def budget_for_profile(
    card: ModelCard,
    overlay: ContextWindowOverlay | None = None,
    *,
    overrides: BudgetOverrides | None = None,
) -> ModelBudget:
    """B1-B5 over the physical window of O3.

    context tokens = override → ``preferred_context_tokens`` → size-class default (B3), clamped to
    ``window - reserve`` and floored at 1,024 (B4); tool count = override → ``max_tool_count`` → default.
    reserve = ``max_output_tokens`` or 4,096, capped at half the physical window (integer division).
    The card's safety margin lowers the clamp to ``window - reserve - margin`` (see the module docstring).
    """
    window = physical_window_of(card, overlay)
    if window is None:
        raise ValidationFailed(
            f"model card {card.word!r} has no context window: declare the card's context_window or an "
            f"overlay context_tokens before budgeting it",
            field="context_window",
            code="model_window_unknown",
            details={"word": card.word},
        )
    size_class = size_class_of(card)
    defaults = SIZE_CLASS_DEFAULTS[size_class]
    request = overrides or BudgetOverrides()

    wanted_tokens = _first_declared(
        request.context_tokens, card.overrides.context_tokens, card.preferred_context_tokens
    )
    tool_count = _first_declared(request.tool_count, card.overrides.tool_count, card.max_tool_count)

    reserve = min(card.max_output_tokens or DEFAULT_RESERVE_OUTPUT_TOKENS, window // 2)
    wanted = defaults.context_tokens if wanted_tokens is None else wanted_tokens
    margin = safety_margin_of(card, window - reserve)
    context_tokens = min(wanted, window - reserve - margin)
    return ModelBudget(
        size_class=size_class,
        context_tokens=max(context_tokens, CONTEXT_TOKENS_FLOOR),
        tool_count=defaults.tool_count if tool_count is None else tool_count,
        reasoning=defaults.reasoning,
        reserve_output_tokens=reserve,
        window=window,
        safety_margin_tokens=margin,
    )


def safety_margin_of(card: ModelCard, usable: int) -> int:
    """The tokens the card's safety margin holds back from ``usable`` (``window - reserve``): its token
    count, or its percent of ``usable`` rounded up; never more than ``usable``."""
    if card.safety_margin_tokens is not None:
        return min(card.safety_margin_tokens, usable)
    if card.safety_margin_percent is not None:
        return min(-(-usable * card.safety_margin_percent // 100), usable)
    return 0


def budget_for_ref(
    ref: str | ModelCard,
    catalog: ModelCatalog,
    settings: Mapping[str, ContextWindowOverlay] | None,
    *,
    overrides: BudgetOverrides | None = None,
) -> ModelBudget:
    """The live budget for a call made under ``ref``: a catalog word (resolved, overlay looked up per O5) or
    a pinned ``ModelCard`` (used as declared, never overlaid). Unknown words raise ``ValidationFailed``."""
    card = ref if isinstance(ref, ModelCard) else catalog.resolve(ref)
    return budget_for_profile(card, overlay_for(settings, ref, catalog), overrides=overrides)
