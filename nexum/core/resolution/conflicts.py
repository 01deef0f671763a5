"""Conflicts between claims (R5): items on one subject that say different things form a group, every side
kept with its provenance; a group matters when it touches the plan.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from nexum.core.digests import digest_of
from nexum.core.resolution.model import (
    LABEL_CONFLICT,
    ConflictGroup,
    ItemKey,
    RequiredQuestion,
    RetrievedItem,
    item_key,
)
from nexum.core.resolution.subjects import normalize_subject, subjects_related


def _document_of(locator: str) -> str:
    """The document a locator points into (``docs/a.md#install`` → ``docs/a.md``)."""
    return locator.split("#", 1)[0]


def conflict_groups(items: Iterable[RetrievedItem]) -> tuple[ConflictGroup, ...]:
    """Items on the same subject whose claims differ form one group (all items on that subject, so every side
    keeps its provenance). Parts of one document (same source, same locator before ``#``) never conflict with
    each other. The group id is the digest of the sorted member digests."""
    by_subject: dict[str, list[RetrievedItem]] = defaultdict(list)
    for item in items:
        if item.subject and item.subject.strip():
            by_subject[normalize_subject(item.subject)].append(item)
    groups = []
    for subject, members in by_subject.items():
        unique = {(m.source, m.locator, m.digest): m for m in members}
        ordered = sorted(unique.values(), key=lambda m: (m.digest, m.source, m.locator))
        disagree = any(
            a.claim != b.claim and (a.source, _document_of(a.locator)) != (b.source, _document_of(b.locator))
            for i, a in enumerate(ordered)
            for b in ordered[i + 1 :]
        )
        if disagree:
            group_id = digest_of(sorted(m.digest for m in ordered))
            groups.append(ConflictGroup(group_id=group_id, subject=subject, members=tuple(ordered)))
    return tuple(sorted(groups, key=lambda g: (g.group_id, g.subject)))


def _phrase_in(subject: str, text: str) -> bool:
    return (
        re.search(r"(?<!\w)" + re.escape(normalize_subject(subject)) + r"(?!\w)", normalize_subject(text))
        is not None
    )


def conflict_touches_plan(
    group: ConflictGroup,
    step_inputs: Sequence[str],
    success_criteria: Sequence[str],
    required_questions: Sequence[RequiredQuestion],
) -> bool:
    """A conflict touches the plan when its subject is (or nests with) a step input, a required question's
    subject, or is named in a step input or success criterion."""
    for question in required_questions:
        if any(subjects_related(group.subject, subject) for subject in question.subjects):
            return True
    for text in (*step_inputs, *success_criteria):
        if text and (subjects_related(group.subject, text) or _phrase_in(group.subject, text)):
            return True
    return False


def mark_conflicts(
    candidates: Mapping[ItemKey, RetrievedItem],
) -> tuple[dict[ItemKey, RetrievedItem], tuple[ConflictGroup, ...]]:
    """The candidates with each conflict group's members labelled and given the group's id (R5)."""
    groups = conflict_groups(candidates.values())
    marked = dict(candidates)
    for group in groups:
        for member in group.members:
            ident = item_key(member)
            marked[ident] = replace(marked[ident], conflict_group=group.group_id).with_labels(LABEL_CONFLICT)
    return marked, groups
