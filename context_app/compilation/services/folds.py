"""Compaction (C11, O6): fold a task's oldest progress notes and tool calls into one summary when together
they pass the compaction threshold, and say, without writing, which fold a compile would make now.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from functools import cached_property
from operator import attrgetter
from typing import Any, overload

from django.db import transaction
from django.utils.module_loading import import_string

from context_app.compilation.candidates import CANDIDATES
from context_app.compilation.services.compile_settings import summarizer_path
from context_app.world.models import WorldItem
from context_app.world.services.records import progress_record
from context_app.world.services.scopes import Scope
from context_app.world.vectors import NewVector
from nexum.adapters.embedding import Embedder
from nexum.adapters.tokenization import counter_for
from nexum.core.compilation import events as compilation_events
from nexum.core.compilation import rules as compilation_rules
from nexum.core.trust import TrustClass
from nexum.core.world.items import TEXT_MAX
from nexum.eventstore import reading, store
from tasks_app.models import Task

SUMMARY_MAX_TOKENS = 4000


def task_compact(
    *, task: Task, threshold: int, encoding: str, actor: str, embedder: Embedder | None = None
) -> WorldItem | None:
    """Fold the oldest progress notes and tool calls of ``task`` into one summary when together they exceed
    ``threshold`` tokens (in ``encoding``). Returns the summary item, or ``None`` when nothing was folded.
    ``embedder``: the one the compile that folds ranks by (its candidates are read once, with its vectors).

    The summary is a progress note of the task (trust: the lowest of the folded items'); the fold is a
    ``ContextCompacted`` event listing the folded ids. The folded items stay in the log and the world state.
    """
    fold = fold_for(task=task, threshold=threshold, encoding=encoding, embedder=embedder)
    if fold is None:
        return None
    folded, summary, trust_class = fold
    path = summarizer_path()
    fold_id = str(uuid.uuid4())
    with transaction.atomic():
        item = progress_record(
            scope=Scope(str(task.project_id), str(task.goal_id), str(task.id)),
            text=summary,
            trust_class=trust_class,
            actor=actor,
            idempotency_key=f"compaction-{fold_id}",
        )
        stream = compilation_events.compaction_stream(str(task.id))
        store.append(
            stream_id=stream,
            events=[
                compilation_events.ContextCompacted(
                    fold_id=fold_id,
                    task_id=str(task.id),
                    goal_id=str(task.goal_id),
                    summary_id=str(item.id),
                    folded_ids=[c.id for c in folded],
                    folded_tokens=sum(c.tokens for c in folded),
                    threshold=threshold,
                    encoding=encoding,
                    summarizer=path,
                )
            ],
            expected_version=reading.stream_version(stream),
            actor=actor,
            project_id=str(task.project_id),
        )
    return item


class _Unsummarizable:
    """The folds the summarizer found no useful summary for, by task, the marks of its candidates (equal
    marks: the same notes), threshold, encoding and summarizer: a compile of an unchanged task does not read
    its notes again to be refused again. Bounded, oldest forgotten first; per process, as the candidates."""

    LIMIT = 4096

    def __init__(self) -> None:
        self._tried: OrderedDict[Hashable, None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, tried: Hashable) -> bool:
        with self._lock:
            return tried in self._tried

    def add(self, tried: Hashable) -> None:
        with self._lock:
            self._tried[tried] = None
            while len(self._tried) > self.LIMIT:
                self._tried.popitem(last=False)


_UNSUMMARIZABLE = _Unsummarizable()


def fold_for(
    *,
    task: Task,
    threshold: int,
    encoding: str,
    embedder: Embedder | None = None,
    embedded: list[NewVector] | None = None,
) -> tuple[list[compilation_rules.FoldCandidate], str, str] | None:
    """The fold a compile would make now: what it folds, the summary and the summary's trust class; ``None``
    when none is due or the summarizer finds no useful summary for it. Pure reading: a compile decides with
    it, inside its snapshot and without the log's lock, whether it must fold, so a task whose notes are over
    the threshold but cannot be summarized usefully compiles as any other. The candidates are read as the
    compile reads them (by its ``embedder``: one read of the world, shared with the compile)."""
    if task.is_goal:
        return None
    counter = counter_for(encoding)
    candidates = CANDIDATES.refresh(
        task=task, encoding=encoding, counter=counter, embedder=embedder, embedded=embedded
    )
    path = summarizer_path()
    tried = (str(task.id), candidates.marks, threshold, encoding, path)
    if tried in _UNSUMMARIZABLE:
        return None  # the same notes were planned and refused before: no need to plan them again
    order = candidates.fold_order
    planned = compilation_rules.plan_fold(order, threshold=threshold)
    if not planned:
        return None
    folded, summary = _summarized(planned, sum(map(_tokens, order)), threshold, import_string(path), counter)
    if not folded:
        _UNSUMMARIZABLE.add(tried)
        return None
    # The summary is as trusted as the least trusted entry it folds (an agent's notes stay agent_reported).
    trust = {item.id: item.trust_class for item in candidates.compacted_items()}
    lowest = min(TrustClass.parse(trust[c.id]) for c in folded)
    return folded, summary, min(lowest, TrustClass.repository_authored).name


class _FoldTexts:
    """The rendered texts of a planned fold's entries, read in one query when first needed."""

    def __init__(self, planned: Sequence[compilation_rules.FoldCandidate]) -> None:
        self._ids = [candidate.id for candidate in planned]

    @cached_property
    def by_id(self) -> dict[uuid.UUID, str]:
        ids = [uuid.UUID(item_id) for item_id in self._ids]
        return dict(WorldItem.objects.filter(id__in=ids).values_list("id", "rendered"))


class _FoldEntries(Sequence[tuple[str, str]]):
    """A fold's entries as the summarizer reads them, ``(kind, rendered text)`` oldest first. The texts are
    read only when the summarizer looks at an entry: one that refuses on the count alone (the default, when
    the entries are too many for a useful summary in its budget) reads no row."""

    def __init__(self, folded: Sequence[compilation_rules.FoldCandidate], texts: _FoldTexts) -> None:
        self._folded = folded
        self._texts = texts

    def __len__(self) -> int:
        return len(self._folded)

    @overload
    def __getitem__(self, index: int) -> tuple[str, str]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, str]]: ...

    def __getitem__(self, index: int | slice) -> tuple[str, str] | list[tuple[str, str]]:
        if isinstance(index, slice):
            return [self._entry(candidate) for candidate in self._folded[index]]
        return self._entry(self._folded[index])

    def _entry(self, candidate: compilation_rules.FoldCandidate) -> tuple[str, str]:
        return candidate.kind, self._texts.by_id[uuid.UUID(candidate.id)]


def _summarized(
    folded: list[compilation_rules.FoldCandidate],
    total: int,
    threshold: int,
    summarize: compilation_rules.Summarizer,
    counter: Any,
) -> tuple[list[compilation_rules.FoldCandidate], str]:
    """The planned fold with its summary, or, when the summarizer finds no useful summary within its budget
    (an empty answer), the oldest half of it, and so on down to two entries; none when even that fails (a
    fold without a useful summary does not happen)."""
    kept = total - sum(candidate.tokens for candidate in folded)
    texts = _FoldTexts(folded)
    while len(folded) >= 2:
        budget = compilation_rules.summary_budget(
            threshold=threshold, kept_tokens=kept, folded_tokens=sum(c.tokens for c in folded)
        )
        budget = min(budget, SUMMARY_MAX_TOKENS)
        entries = _FoldEntries(folded, texts)
        summary = str(summarize(entries, max_tokens=budget, counter=counter))[:TEXT_MAX].strip()
        if summary and counter.count(summary) <= budget:
            return folded, summary
        kept += sum(c.tokens for c in folded[len(folded) // 2 :])
        folded = folded[: len(folded) // 2]
    return [], ""


_tokens = attrgetter("tokens")
