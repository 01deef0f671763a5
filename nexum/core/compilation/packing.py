"""What fits the budget before the block is rendered (C2–C5): the tools, the pinned sections (cut in
proportion when they alone do not fit), then evidence and state by atomic first fit, every item left out
recorded."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, count, repeat
from operator import ge
from typing import Any, NamedTuple

from nexum.core.catalog.budgets import ModelBudget
from nexum.core.compilation.costs import HEADER_OVERHEAD, MIN_SAFETY_MARGIN, SAFETY_MARGIN_RATIO, Costs
from nexum.core.compilation.exclusions import (
    BELOW_RELEVANCE,
    DUPLICATE_TOOL,
    Exclusions,
    budget_reason,
    tool_count_reason,
    tool_tokens_reason,
)
from nexum.core.compilation.model import (
    EVIDENCE_KINDS,
    STATE_KINDS,
    BudgetTooSmall,
    CompileInput,
    Entry,
    ToolSpec,
    Truncation,
)
from nexum.core.compilation.ranking import Query, RankedSection, RankedSections, query_of
from nexum.core.compilation.rendering import render_pinned
from nexum.core.compilation.versions import RELEVANT_FROM
from nexum.core.digests import canonical_json
from nexum.core.errors import ValidationFailed
from nexum.core.tokens import TokenCounter
from nexum.core.world.relevance import stems_of, terms_of

TRUNCATION_MARK = "…"


class Packed(NamedTuple):
    """What fits, before the block is rendered and counted: the tools, the pinned skeleton and the ranked
    entries of each section that fit their allowances, with the exclusions so far."""

    tool_names: tuple[str, ...]
    tool_tokens: int
    pinned: Pinned
    evidence: list[Entry]
    evidence_tokens: int
    state: list[Entry]
    state_tokens: int
    exclusions: Exclusions


def pack(
    compile_input: CompileInput,
    budget: ModelBudget,
    counter: TokenCounter,
    version: int,
    sections: RankedSections,
) -> Packed:
    """The tools, the pinned sections, then the evidence and state entries that fit ``budget``, in that order:
    each spends what the previous ones left."""
    context_budget = budget.context_tokens
    query = query_of(compile_input, version)
    exclusions = Exclusions()

    tool_names, tool_tokens = _pack_tools(compile_input, budget, counter, query, exclusions, version)

    pinned_allowance = context_budget - tool_tokens
    pinned = fit_pinned(compile_input, pinned_allowance, counter)

    margin = max(MIN_SAFETY_MARGIN, math.ceil(context_budget * SAFETY_MARGIN_RATIO))
    remaining = max(0, pinned_allowance - pinned.tokens - HEADER_OVERHEAD - margin)
    costs = Costs(counter, version)

    evidence_allowance = math.floor(remaining * compile_input.evidence_share)
    evidence_sections = [("evidence", getattr(sections, kind)) for kind in EVIDENCE_KINDS]
    evidence, evidence_tokens = _first_fit(evidence_sections, evidence_allowance, costs, exclusions)

    state_sections = [(kind, getattr(sections, kind)) for kind in STATE_KINDS]
    state, state_tokens = _first_fit(state_sections, remaining - evidence_tokens, costs, exclusions)
    return Packed(tool_names, tool_tokens, pinned, evidence, evidence_tokens, state, state_tokens, exclusions)


# --- tools (C2) ------------------------------------------------------------------------------------------


def _pack_tools(
    compile_input: CompileInput,
    budget: ModelBudget,
    counter: TokenCounter,
    query: Query,
    exclusions: Exclusions,
    version: int,
) -> tuple[tuple[str, ...], int]:
    ranked: list[tuple[tuple[Any, ...], ToolSpec, str]] = []
    terms = query.terms
    for tool in compile_input.tools:
        try:
            definition = canonical_json(
                {"name": tool.name, "description": tool.description, "schema": tool.schema}
            )
        except (TypeError, ValueError) as error:
            raise ValidationFailed(
                f"tool {tool.name!r}: schema is not JSON: {error}", field="tools"
            ) from None
        if tool.score is not None and not math.isfinite(tool.score):
            raise ValidationFailed(f"tool {tool.name!r}: score must be finite", field="tools")
        words = terms_of(f"{tool.name} {tool.description}")
        overlap = len(terms.intersection(words if version < RELEVANT_FROM else stems_of(words)))
        has_score = tool.score is not None
        key = (not tool.pinned, not has_score, -(tool.score or 0.0), -overlap, tool.name, definition)
        ranked.append((key, tool, definition))
    ranked.sort(key=lambda entry: entry[0])

    half = budget.context_tokens // 2
    names: list[str] = []
    seen: set[str] = set()
    tokens = 0
    for _, tool, definition in ranked:
        cost = counter.count(definition)
        charged = cost if compile_input.charge_tool_schemas else 0
        left = half - tokens
        if tool.name in seen:
            exclusions.add("tool", tool.name, cost, left, DUPLICATE_TOOL)
        elif len(names) >= budget.tool_count:
            exclusions.add("tool", tool.name, cost, left, tool_count_reason(budget.tool_count))
        elif charged > left:
            exclusions.add("tool", tool.name, charged, left, tool_tokens_reason(charged, left))
        else:
            names.append(tool.name)
            seen.add(tool.name)
            tokens += charged
            continue
        seen.add(tool.name)
    return tuple(names), tokens


# --- pinned (C3) -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pinned:
    """The pinned sections as rendered within ``allowance`` tokens, their count, and the sections cut."""

    text: str
    tokens: int
    allowance: int
    truncations: tuple[Truncation, ...]


def _pinned_pieces(compile_input: CompileInput) -> list[tuple[str, str]]:
    step = compile_input.step
    pieces = [("goal", compile_input.goal), ("step", step.id), ("step", step.objective)]
    pieces += [("step", text) for text in step.inputs]
    pieces += [("constraints", text) for text in compile_input.constraints]
    pieces += [("success_criteria", text) for text in compile_input.success_criteria]
    if compile_input.focus:
        pieces.append(("focus", compile_input.focus))
    return pieces


_STEP_ID_PIECE = 1  # an identifier: never cut (part of the skeleton)


def fit_pinned(compile_input: CompileInput, allowance: int, counter: TokenCounter) -> Pinned:
    """The pinned block within ``allowance`` tokens, every text cut in proportion to its size if needed.

    The skeleton (headers, labels, the step id, a mark for every cut text) must fit, or ``BudgetTooSmall``.
    """
    pieces = _pinned_pieces(compile_input)
    text = render_pinned(pieces)
    tokens = counter.count(text)
    if tokens <= allowance:
        return Pinned(text, tokens, allowance, ())

    fixed = [index == _STEP_ID_PIECE or not piece for index, (_, piece) in enumerate(pieces)]
    skeleton_pieces = [
        (section, piece if keep_whole else TRUNCATION_MARK)
        for (section, piece), keep_whole in zip(pieces, fixed, strict=True)
    ]
    skeleton = render_pinned(skeleton_pieces)
    skeleton_tokens = counter.count(skeleton)
    if skeleton_tokens > allowance:
        raise BudgetTooSmall(
            f"the pinned content needs at least {skeleton_tokens} tokens even when cut; "
            f"{max(allowance, 0)} left after tool schemas",
            field="budget",
            details={"needed": skeleton_tokens, "left": max(allowance, 0)},
        )
    piece_tokens = [counter.count(piece) for _, piece in pieces]
    total = sum(count for count, keep_whole in zip(piece_tokens, fixed, strict=True) if not keep_whole) or 1
    for_texts = allowance - skeleton_tokens
    attempts = 0
    while for_texts > 0:
        attempts += 1
        ratio = for_texts / total
        cut: list[tuple[str, str]] = []
        kept: list[int] = []
        for (section, piece), original, keep_whole in zip(pieces, piece_tokens, fixed, strict=True):
            keep = math.floor(original * ratio)
            if keep_whole or keep >= original:
                cut.append((section, piece))
                kept.append(original)
            else:
                prefix, prefix_tokens = _prefix_within(piece, keep, counter)
                cut.append((section, prefix + TRUNCATION_MARK))
                kept.append(prefix_tokens)
        text = render_pinned(cut)
        tokens = counter.count(text)
        if tokens <= allowance:
            return Pinned(text, tokens, allowance, _truncations(pieces, cut, piece_tokens, kept))
        # BPE joins make the first cut miss by a few tokens; after a few tries cut faster so this ends soon.
        for_texts -= max(tokens - allowance, for_texts // 8 if attempts > 3 else 1)
    kept = [count if keep_whole else 0 for count, keep_whole in zip(piece_tokens, fixed, strict=True)]
    truncations = _truncations(pieces, skeleton_pieces, piece_tokens, kept)
    return Pinned(skeleton, skeleton_tokens, allowance, truncations)


def _truncations(
    pieces: Sequence[tuple[str, str]],
    cut: Sequence[tuple[str, str]],
    originals: Sequence[int],
    kept: Sequence[int],
) -> tuple[Truncation, ...]:
    records: list[Truncation] = []
    for section in ("goal", "step", "constraints", "success_criteria"):
        indexes = [index for index, (name, _) in enumerate(pieces) if name == section]
        if any(cut[index][1] != pieces[index][1] for index in indexes):
            records.append(
                Truncation(section, sum(originals[i] for i in indexes), sum(kept[i] for i in indexes))
            )
    return tuple(records)


def _prefix_within(text: str, tokens: int, counter: TokenCounter) -> tuple[str, int]:
    """The longest prefix of ``text`` that counts at most ``tokens`` (binary search on characters)."""
    low, high = 0, len(text)
    low_tokens = 0
    while low < high:
        middle = (low + high + 1) // 2
        middle_tokens = counter.count(text[:middle])
        if middle_tokens <= tokens:
            low, low_tokens = middle, middle_tokens
        else:
            high = middle - 1
    return text[:low], low_tokens


# --- evidence and state (C4, C5) -------------------------------------------------------------------------


def _first_fit(
    sections: Sequence[tuple[str, RankedSection]],
    allowance: int,
    costs: Costs,
    exclusions: Exclusions,
) -> tuple[list[Entry], int]:
    """Atomic first fit in the given order; a section's header is charged with its first included item.

    Only items whose metadata cost fits are looked at one by one; the runs of items between two inclusions
    (and the tail) are recorded in bulk, so a large world state costs little per item.
    """
    included: list[Entry] = []
    left = max(0, allowance)
    started: set[str] = set()
    for section, ranked in sections:
        items, ids = ranked.items, ranked.ids
        if not items:
            continue
        kind = items[0].kind
        header = 0 if section in started else costs.headers[section]
        relevant = len(items) if ranked.relevant is None else ranked.relevant
        lows = list(ranked.costs[:relevant])
        room = left - header
        # Indexes of items whose lower cost fits the room, found by C-level iterators that share one cursor:
        # after an inclusion the filter restarts, with the smaller room, where the last one stopped.
        positions, rest = count(), iter(lows)
        fitting = compress(positions, map(ge, repeat(room), rest))
        run_start = 0
        while (index := next(fitting, -1)) >= 0:
            item = items[index]
            cost = lows[index]
            quoted = item.quoted_in(costs.version)
            if quoted or (costs.origin_lines and item.has_origin_line):
                cost += costs.quoted_extra(item) if quoted else costs.origin_extra(item)
                if cost > room:
                    lows[index] = cost
                    continue
            _exclude_run(exclusions, ranked, run_start, index, lows, max(room, 0))
            included.append(Entry(section, item, cost + header))
            room -= cost
            left = room
            header = 0
            started.add(section)
            run_start = index + 1
            fitting = compress(positions, map(ge, repeat(room), rest))
        _exclude_run(exclusions, ranked, run_start, relevant, lows, max(room, 0))
        exclusions.add_reasoned_run(
            kind, ids[relevant:], ranked.costs[relevant:], max(left, 0), BELOW_RELEVANCE
        )
    return included, max(0, allowance) - left


def _exclude_run(
    exclusions: Exclusions, ranked: RankedSection, start: int, stop: int, lows: Sequence[int], left: int
) -> None:
    """Record ``ranked.items[start:stop]`` as not fitting with ``left`` tokens left (costs from ``lows``);
    an item there through a named entity says so (``RankedSection.links``)."""
    if start >= stop:
        return
    kind, ids, links = ranked.items[start].kind, ranked.ids, ranked.links
    if not links:
        exclusions.add_run(kind, ids[start:stop], lows[start:stop], left)
        return
    plain = start
    for index in range(start, stop):
        link = links.get(ids[index])
        if link is not None:
            exclusions.add_run(kind, ids[plain:index], lows[plain:index], left)
            exclusions.add(kind, ids[index], lows[index], left, f"{link}; {budget_reason(lows[index], left)}")
            plain = index + 1
    exclusions.add_run(kind, ids[plain:stop], lows[plain:stop], left)
