"""Packing the candidates into the budget (R7): the order items are taken in, and what is taken or left
out, with why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nexum.core.resolution.model import (
    ItemKey,
    LeftOut,
    RequiredQuestion,
    ResolveBudget,
    RetrievedItem,
    item_key,
)
from nexum.core.resolution.subjects import subject_matches, subjects_related


def selection_order(
    candidates: Mapping[ItemKey, RetrievedItem],
    questions: Sequence[RequiredQuestion],
    plan_subjects: Sequence[str],
) -> list[RetrievedItem]:
    """Items answering required questions first (in question order), then items on the plan's subjects,
    then the rest; within each, fresh before stale, higher trust first, suspected instructions last."""

    def priority(item: RetrievedItem) -> tuple[Any, ...]:
        answers = [
            i for i, q in enumerate(questions) if any(subject_matches(item.subject, s) for s in q.subjects)
        ]
        on_plan = any(subjects_related(item.subject, s) for s in plan_subjects) if item.subject else False
        tier = 0 if answers else (1 if on_plan else 2)
        return (
            tier,
            min(answers, default=len(questions)),
            item.stale,
            -int(item.trust_class),
            item.suspected_instruction,
            item.source,
            item.locator,
            item.digest,
        )

    return sorted(candidates.values(), key=priority)


@dataclass(frozen=True)
class Packed:
    selected: tuple[RetrievedItem, ...]
    left_out: tuple[LeftOut, ...]
    tokens_used: int


def pack(
    ordered: Sequence[RetrievedItem], budget: ResolveBudget, count_tokens: Callable[[str], int]
) -> Packed:
    """Take the items in order while they fit the budget; a conflict group's members together when the whole
    group fits, else one by one. What does not fit is left out with why."""
    token_cache: dict[str, int] = {}

    def tokens_of(item: RetrievedItem) -> int:
        if item.digest not in token_cache:
            token_cache[item.digest] = int(count_tokens(item.text))
        return token_cache[item.digest]

    selected: list[RetrievedItem] = []
    left_out: list[LeftOut] = []
    considered: set[ItemKey] = set()
    tokens_used = 0

    def fits(unit: Sequence[RetrievedItem]) -> bool:
        return len(selected) + len(unit) <= budget.max_items and tokens_used + sum(map(tokens_of, unit)) <= (
            budget.max_tokens
        )

    for item in ordered:
        ident = item_key(item)
        if ident in considered:
            continue
        unit = [item]
        if item.conflict_group is not None:
            unit = [m for m in ordered if m.conflict_group == item.conflict_group]
            unit = [m for m in unit if item_key(m) not in considered]
            if not fits(unit):
                unit = [item]  # the whole group does not fit: take its members one by one
        if fits(unit):
            for member in unit:
                selected.append(member)
                tokens_used += tokens_of(member)
                considered.add(item_key(member))
            continue
        considered.add(ident)
        needed = tokens_of(item)
        if len(selected) >= budget.max_items:
            reason = f"item budget spent ({budget.max_items} items selected)"
        else:
            reason = f"needed {needed} tokens, {budget.max_tokens - tokens_used} left"
        left_out.append(LeftOut(item.source, item.locator, item.digest, needed, reason))
    return Packed(tuple(selected), tuple(left_out), tokens_used)
