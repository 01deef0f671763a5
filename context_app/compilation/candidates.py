"""The candidate cache: each task's candidate items kept in process, brought up to date incrementally, with
their rankings, sized by memory (issue 14 item 4, issue 15).

A compile's candidates are metadata only (id, kind, the stored token count in the compile's encoding, line
count, position, verified, trust, origin, relevance terms and named entities: ``CandidateRow``, read by the
queries of ``candidate_rows``), and, for the kinds ranked by relevance, the item's vector by the compile's
embedder, read with the rows that changed and only for them, in the same query (an item stored before vectors
existed is embedded then, once, and the new vectors handed to the compile to store: ``NewVector``).
``CandidateCache.refresh`` serves a task's list as the
world stands: it reads the task's marks (the last log position that changed a row of its goal, and its last
fold, each with the fingerprint of the event there); when they have not moved the kept list is served as is,
when they moved forward only the rows changed since (and the folds made since) are read, by index, and
applied, and when they moved back (a replay inside ``state_as_of``, read models rebuilt to an older position)
or a fingerprint changed (the list was read inside a transaction that then rolled back) the list is read
whole. Rows never leave a goal, each change of a row sets its ``changed_position`` to the position of its
event, and folds are only ever added, so equal marks mean an equal world for the task.

``CandidateCache.ranked`` keeps, per task and section, the section ranked and costed for the compiler
(``nexum.core.compilation.ranking.rank_section``) while the section's candidates, the extra items joined
to it and the query stay the same: the memo covers every task in the cache and leaves with it. A
newest-first section that only gained items newer than all of it (an agent's new note) keeps its ranking
with them in front (``ranking.newest_first_extended``), and a task's notes keep the order a fold plans them
in (``TaskCandidates.fold_order``), so an agent loop's compile sorts neither again.

Memory. Entries are evicted least recently used once the estimated total passes ``NEXUM_COMPILE_CACHE_MB``
(default 256). An entry is charged for its references (8 bytes per slot of its tuples, sets and cost
arrays); the items themselves are shared by every entry holding them (the tasks of one goal share most) and
charged once while any entry holds one (``ITEM_BYTES`` each, an estimate: the object, its id string, its
terms tuple and its interning entry). A read inside a compile's snapshot never replaces a newer list kept
by a concurrent compile of the same task.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter, is_
from typing import Any

from django.conf import settings

from context_app.compilation.candidate_rows import (
    NO_MARKS,
    RANKED_KINDS,
    CandidateRow,
    Marks,
    changed_rows,
    task_marks,
)
from context_app.compilation.models import CompactionFold
from context_app.world.models import WorldItem
from context_app.world.vectors import NewVector, embed_items
from nexum.adapters.embedding import Embedder, embedder_id
from nexum.adapters.gc_pause import collection_paused
from nexum.core.compilation.model import ContextItem
from nexum.core.compilation.ranking import NEWEST_FIRST_KINDS, RankedSection, newest_first_extended
from nexum.core.compilation.rules import COMPACTED_KINDS, FoldCandidate
from nexum.core.tokens import TokenCounter
from nexum.core.world.items import FACT_CURRENT
from nexum.core.world.relevance import stems_of
from nexum.eventstore.replica import read_connection
from tasks_app.models import Task

SECTION_KINDS = ("failure", "decision", "fact", "artifact", "progress", "diagnostic")
COMPACTED_SECTIONS = ("progress", "diagnostic")
"""The sections of the items a compaction folds (``rules.COMPACTED_KINDS``: tool calls are ``diagnostic``)."""
DEFAULT_CACHE_MB = 256
ITEM_BYTES = 480
SLOT_BYTES = 8
ENTRY_BYTES = 4096
FOLD_CANDIDATE_BYTES = 96


@dataclass(frozen=True)
class TaskCandidates:
    """A task's candidate items as of one state of its goal, per compiler section (tool calls are
    ``diagnostic``), and the ids of its own progress notes and tool calls (what compaction folds).

    ``marks`` are where the world stood when it was read; ``folded`` the ids the task's folds left out. Never
    changed once built: a newer state is a new value that shares the sections that did not change, so the
    rankings kept for those stay valid.
    """

    marks: Marks
    folded: frozenset[str]
    sections: Mapping[str, tuple[ContextItem, ...]]
    compacted: frozenset[str]
    kept_fold_order: tuple[FoldCandidate, ...] | None = None
    """``fold_order`` brought forward from the previous value, when that one had made it (``_fold_order``)."""

    @cached_property
    def fold_order(self) -> tuple[FoldCandidate, ...]:
        """The ``compacted`` items as a fold plans them, oldest first (by position, then id). Made when first
        asked (a compile that plans no fold never sorts the notes) and then brought forward by the next
        values with the new notes after it, so an agent loop's compile does not sort every note again."""
        if self.kept_fold_order is not None:
            return self.kept_fold_order
        return tuple(sorted(map(_fold_candidate, self.compacted_items()), key=_fold_key))

    def made_fold_order(self) -> tuple[FoldCandidate, ...] | None:
        """``fold_order`` if it was made (or brought forward), else ``None``."""
        made: tuple[FoldCandidate, ...] | None = self.__dict__.get("fold_order", self.kept_fold_order)
        return made

    @property
    def items(self) -> tuple[ContextItem, ...]:
        return tuple(item for kind in SECTION_KINDS for item in self.sections[kind])

    @property
    def by_kind(self) -> dict[str, dict[str, ContextItem]]:
        return {kind: {item.id: item for item in self.sections[kind]} for kind in SECTION_KINDS}

    def compacted_items(self) -> list[ContextItem]:
        """The task's own progress notes and tool calls (``diagnostic`` here), each with its token count."""
        if not self.compacted:
            return []
        compacted = self.compacted
        return [item for kind in COMPACTED_SECTIONS for item in self.sections[kind] if item.id in compacted]

    def estimated_bytes(self) -> int:
        """The references this value holds (its items are charged by the cache, once) and its fold order
        (a 4-tuple per note, sharing the notes' strings)."""
        slots = sum(len(items) for items in self.sections.values()) + 4 * (
            len(self.folded) + len(self.compacted)
        )
        folds = len(self.made_fold_order() or ())
        return ENTRY_BYTES + SLOT_BYTES * slots + FOLD_CANDIDATE_BYTES * folds


EMPTY = TaskCandidates(NO_MARKS, frozenset(), {kind: () for kind in SECTION_KINDS}, frozenset())


@dataclass
class _Entry:
    candidates: TaskCandidates
    ranked: dict[str, tuple[tuple[Any, ...], RankedSection]] = field(default_factory=dict)
    """Per section: the key it was ranked for (the base tuple, the extra items and their texts, the query and
    the label cost) and the ranking."""

    def estimated_bytes(self) -> int:
        ranked = sum(3 * len(section.ids) for _, section in self.ranked.values())
        return self.candidates.estimated_bytes() + SLOT_BYTES * ranked


class CandidateCache:
    """Candidate lists and their rankings per (database, encoding, task), least recently used evicted first
    once the estimated total passes ``max_bytes`` (``NEXUM_COMPILE_CACHE_MB`` when not given)."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._entry_bytes: dict[tuple[Any, ...], int] = {}
        self._total = 0
        # Items by (id, changed position, token count): one object per item state, shared by every task.
        self._items: weakref.WeakValueDictionary[tuple[Any, ...], ContextItem] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    @property
    def max_bytes(self) -> int:
        if self._max_bytes is not None:
            return self._max_bytes
        return int(getattr(settings, "NEXUM_COMPILE_CACHE_MB", DEFAULT_CACHE_MB)) * 1024 * 1024

    def estimated_bytes(self) -> int:
        with self._lock:
            return self._total + ITEM_BYTES * len(self._items)

    def __len__(self) -> int:
        return len(self._entries)

    # --- refresh and eviction -------------------------------------------------------------------------

    def refresh(
        self,
        *,
        task: Task,
        encoding: str,
        counter: TokenCounter,
        embedder: Embedder | None = None,
        embedded: list[NewVector] | None = None,
    ) -> TaskCandidates:
        """The candidates of ``task`` as the world stands for this connection, read incrementally, their
        ranked items carrying their vectors by ``embedder`` (none without one). Vectors made here for items
        that had none are appended to ``embedded``, for the caller to store."""
        key = _key(task, encoding, embedder_id(embedder))
        with self._lock:
            entry = self._entries.get(key)
        kept = EMPTY if entry is None else entry.candidates
        now, kept_now = task_marks(task, kept.marks)
        if (
            entry is None
            or kept_now != kept.marks
            or now.high < kept.marks.high
            or now.fold_high < kept.marks.fold_high
        ):
            base = EMPTY  # not read yet, built on a rolled-back write, or the world moved back: read it whole
        elif now == kept.marks:
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
            return kept
        else:
            base = kept
        with collection_paused():
            fresh = self._refreshed(base, task, encoding, counter, now, embedder, embedded)
        self._keep(key, fresh, examined=entry)
        return fresh

    def evict(self, *, task_id: str | None = None) -> None:
        """Drop the entries of one task (every encoding), or every entry."""
        with self._lock:
            for key in [key for key in self._entries if task_id is None or key[4] == str(task_id)]:
                self._drop(key)

    def clear(self) -> None:
        self.evict()

    def _keep(self, key: tuple[Any, ...], fresh: TaskCandidates, *, examined: _Entry | None) -> None:
        """Keep ``fresh`` for ``key`` unless, since ``examined`` was read, a concurrent compile of the task
        kept a newer list (this read's snapshot is older: it loses)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry is not examined and _newer(entry.candidates.marks, fresh.marks):
                return
            kept_ranked = {} if entry is None else entry.ranked
            ranked = {}
            for kind, (memo_key, section) in kept_ranked.items():
                base = fresh.sections.get(kind)
                if base is None or memo_key[0] is base:
                    ranked[kind] = (memo_key, section)
                elif kind in NEWEST_FIRST_KINDS and (extended := _extended(memo_key, section, base)):
                    ranked[kind] = extended
            self._put(key, _Entry(fresh, ranked))

    def _put(self, key: tuple[Any, ...], entry: _Entry) -> None:
        """Store ``entry`` (lock held) and evict the least recently used until the total fits."""
        self._total -= self._entry_bytes.pop(key, 0)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        size = entry.estimated_bytes()
        self._entry_bytes[key] = size
        self._total += size
        while len(self._entries) > 1 and self._total + ITEM_BYTES * len(self._items) > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[Any, ...]) -> None:
        self._entries.pop(key, None)
        self._total -= self._entry_bytes.pop(key, 0)

    # --- rankings -------------------------------------------------------------------------------------

    def ranked(
        self,
        *,
        task: Task,
        encoding: str,
        kind: str,
        base: tuple[ContextItem, ...],
        extra: tuple[ContextItem, ...],
        context: tuple[Hashable, ...],
        rank: Callable[[tuple[ContextItem, ...]], RankedSection],
        embedder: str = "",
    ) -> RankedSection:
        """``rank(base + extra)``, kept for the task while ``base`` is the same tuple object, the ``extra``
        items and their texts are equal, and so is ``context`` (what else the ranking depends on)."""
        key = _key(task, encoding, embedder)
        memo_key = (base, extra, tuple(item.text for item in extra), context)
        with self._lock:
            entry = self._entries.get(key)
            kept = None if entry is None else entry.ranked.get(kind)
        if kept is not None and kept[0][0] is base and kept[0][1:] == memo_key[1:]:
            return kept[1]
        section = rank(base + extra if extra else base)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.candidates.sections.get(kind) is base:
                entry.ranked[kind] = (memo_key, section)
                self._put(key, entry)
        return section

    # --- reading --------------------------------------------------------------------------------------

    def _refreshed(
        self,
        base: TaskCandidates,
        task: Task,
        encoding: str,
        counter: TokenCounter,
        now: Marks,
        embedder: Embedder | None,
        embedded: list[NewVector] | None,
    ) -> TaskCandidates:
        """``base`` with the rows changed since its marks applied (and newly folded items taken out)."""
        folded = base.folded
        compacted = base.compacted
        changes: dict[str, dict[str, ContextItem | None]] = {kind: {} for kind in SECTION_KINDS}
        if now.fold_high > base.marks.fold_high:
            new_folds = CompactionFold.objects.filter(task_id=task.id, position__gt=base.marks.fold_high)
            newly = {
                str(item_id) for ids in new_folds.values_list("folded_ids", flat=True) for item_id in ids
            }
            folded = folded | newly
            compacted = compacted - newly
            for kind in SECTION_KINDS:
                changes[kind].update(dict.fromkeys(newly))
        rows = (
            changed_rows(task, encoding, base.marks.high, embedder=embedder_id(embedder))
            if now.high > base.marks.high
            else []
        )
        if rows:
            own = set(compacted)
            live = []
            for row in rows:
                kind = "diagnostic" if row.kind == "tool_call" else row.kind
                if row.status == FACT_CURRENT and row.id not in folded:
                    live.append(row)
                else:
                    changes[kind][row.id] = None
                    own.discard(row.id)
            items = self.items_of(live, counter, embedder=embedder, embedded=embedded)
            for row, item in zip(live, items, strict=True):
                changes[item.kind][item.id] = item
                if row.own and row.kind in COMPACTED_KINDS and not task.is_goal:
                    own.add(item.id)
            compacted = frozenset(own)
        sections = {
            kind: _applied(base.sections[kind], changes[kind]) if changes[kind] else base.sections[kind]
            for kind in SECTION_KINDS
        }
        fresh = TaskCandidates(now, folded, sections, compacted)
        return dataclasses.replace(fresh, kept_fold_order=_fold_order(base, fresh, changes))

    def items_of(
        self,
        rows: Sequence[CandidateRow],
        counter: TokenCounter,
        *,
        embedder: Embedder | None = None,
        embedded: list[NewVector] | None = None,
    ) -> list[ContextItem]:
        """The items the metadata rows describe (the cache's own object when the item's state was seen),
        the ranked ones with their vectors by ``embedder``: the stored ones came with the rows (read by
        ``changed_rows`` for that embedder), missing ones are made in one ``embed`` call and appended to
        ``embedded``.

        Built in one pass with positional arguments, and interned under one lock: a cold compile builds
        every item of the goal here (issue 26, item 5)."""
        name = embedder_id(embedder)
        with self._lock:
            known = self._items
            found = (
                [
                    None
                    if row.tokens is None
                    else known.get((row.id, row.changed_position, row.tokens, name))
                    for row in rows
                ]
                if len(known)
                else [None] * len(rows)
            )
        made: dict[str, bytes] = {}
        if embedder is not None:
            missing = [
                row.id
                for row, item in zip(rows, found, strict=True)
                if item is None and row.vector is None and row.kind in RANKED_KINDS
            ]
            made = self._made_vectors(missing, embedder, embedded) if missing else {}
        intern = sys.intern
        build = ContextItem
        items: list[ContextItem] = []
        fresh: list[tuple[tuple[Any, ...], ContextItem]] = []
        uncounted: list[int] = []
        for row, item in zip(rows, found, strict=True):
            if item is None:
                kind = row.kind
                terms = tuple(map(intern, row.ranked_terms.split(" "))) if row.ranked_terms else ()
                source = row.source
                if kind == "tool_call":
                    kind, origin = "diagnostic", f"tool call: {source}"
                else:
                    kind, origin = intern(kind), intern(source) if source else None
                vector = row.vector
                item = build(
                    kind,
                    row.id,
                    0 if row.tokens is None else int(row.tokens),
                    row.line_count,
                    row.position,
                    bool(row.verified),
                    terms,
                    intern(row.trust_class),
                    origin,
                    None,
                    None,
                    stems_of(terms),
                    made.get(row.id) if vector is None and made else vector,
                    tuple(map(intern, row.ranked_entities.split())) if row.ranked_entities else (),
                )
                if row.tokens is None:
                    uncounted.append(len(items))
                else:
                    fresh.append(((row.id, row.changed_position, row.tokens, name), item))
            items.append(item)
        if fresh:
            with self._lock:
                self._items.update(fresh)
        if uncounted:
            _count_uncounted(items, uncounted, counter)
        return items

    @staticmethod
    def _made_vectors(
        missing: Sequence[str], embedder: Embedder, embedded: list[NewVector] | None
    ) -> dict[str, bytes]:
        """Vectors by ``embedder`` for the ``missing`` items (stored without one), made now in one call and
        appended to ``embedded`` for the compile to store."""
        made = embed_items(missing, embedder)
        if embedded is not None:
            embedded.extend(made)
        return {entry.item_id: entry.vector for entry in made}


def _applied(
    section: tuple[ContextItem, ...], changes: Mapping[str, ContextItem | None]
) -> tuple[ContextItem, ...]:
    """``section`` with items replaced, removed (``None``) or added, by id."""
    kept = [item for item in section if item.id not in changes]
    return (*kept, *(item for item in changes.values() if item is not None))


def _fold_order(
    base: TaskCandidates, fresh: TaskCandidates, changes: Mapping[str, Mapping[str, ContextItem | None]]
) -> tuple[FoldCandidate, ...] | None:
    """``fresh``'s fold order brought forward from ``base``'s, if that was made: when none of its compacted
    items changed or left and the new ones (which came with this read's changes) all come after it, as an
    agent's new notes do, with those appended; else ``None`` (sorted again when asked)."""
    kept = base.made_fold_order()
    changed = [changes[kind] for kind in COMPACTED_SECTIONS]
    if (
        kept is None
        or not base.compacted <= fresh.compacted
        or not all(map(base.compacted.isdisjoint, changed))
    ):
        return None
    added = sorted(
        (
            _fold_candidate(item)
            for items in changed
            for item_id, item in items.items()
            if item is not None and item_id in fresh.compacted
        ),
        key=_fold_key,
    )
    if added and kept and _fold_key(added[0]) <= _fold_key(kept[-1]):
        return None
    return kept + tuple(added)


def _fold_candidate(item: ContextItem) -> FoldCandidate:
    kind = "tool_call" if item.kind == "diagnostic" else item.kind
    return FoldCandidate(item.id, kind, item.token_count, item.position)


_fold_key = attrgetter("position", "id")


def _extended(
    memo_key: tuple[Any, ...], section: RankedSection, base: tuple[ContextItem, ...]
) -> tuple[tuple[Any, ...], RankedSection] | None:
    """The ranking kept for a newest-first section brought forward to ``base``, the section as it stands
    now, when that is the ranked items with new ones after them (``_applied`` keeps the order of the items
    it keeps and adds the new ones last) and they rank in front (``ranking.newest_first_extended``)."""
    ranked_base = memo_key[0]
    if len(base) <= len(ranked_base) or not all(map(is_, base, ranked_base)):
        return None
    extended = newest_first_extended(section, base[len(ranked_base) :])
    return None if extended is None else ((base, *memo_key[1:]), extended)


def _newer(kept: Marks, fresh: Marks) -> bool:
    return kept.high > fresh.high or kept.fold_high > fresh.fold_high


def _key(task: Task, encoding: str, embedder: str) -> tuple[Any, ...]:
    return (
        read_connection.alias,
        read_connection.settings_dict.get("NAME"),
        encoding,
        embedder,
        str(task.id),
        str(task.project_id),
        str(task.goal_id),
        task.is_goal,
    )


def _count_uncounted(items: list[ContextItem], uncounted: Sequence[int], counter: TokenCounter) -> None:
    rendered = dict(
        WorldItem.objects.filter(id__in=[uuid.UUID(items[index].id) for index in uncounted]).values_list(
            "id", "rendered"
        )
    )
    for index in uncounted:
        item = items[index]
        items[index] = dataclasses.replace(item, token_count=counter.count(rendered[uuid.UUID(item.id)]))


CANDIDATES = CandidateCache()
"""The process's cache (gunicorn's threads share it; each worker process has its own)."""
