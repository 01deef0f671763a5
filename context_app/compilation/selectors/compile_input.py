"""The compiler's input for one task, read as the world state stands now (or as of a past position inside
``state_as_of``): its sections ranked, and the texts of the items the compiler includes.

Speed (issue 5, item 2; issue 15). Candidate items are metadata only, kept in process with their rankings
and brought up to date incrementally by the candidate cache (``candidates.CANDIDATES``): a compile in an
agent loop reads the few items recorded since the last call, not the world, and ranks again only the
sections that changed. The texts of the items the compiler includes are fetched afterwards in one query
(``item_text_loader``). Nothing is tokenized but the texts that are not stored world-state items
(check-run output, request and bundle evidence).

Meaning (issue 24). From compiler version 5 (``VECTORS_FROM``) a compile names an embedder: the candidates
carry their stored vectors by it, the items that are not stored world state (check-run output, bundle and
request evidence) and the step's query text (``ranking.query_text``) are embedded in one call, and the
vectors made for stored items that had none come back in ``TaskContextInput.embedded`` for the compile to
store. Without an embedder (``NEXUM_EMBEDDER=none``, or an older version) relevance is by words alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from context_app.compilation.candidate_rows import changed_rows
from context_app.compilation.candidates import CANDIDATES, TaskCandidates
from context_app.compilation.models import CompactionFold
from context_app.compilation.selectors.evidence import (
    check_run_evidence,
    latest_bundle_items,
    request_evidence_items,
)
from context_app.world.models import WorldItem
from context_app.world.selectors import tool_specs, tools_for_scope
from context_app.world.vectors import NewVector
from nexum.adapters import telemetry
from nexum.adapters.embedding import Embedder, embedder_id
from nexum.core.compilation.costs import verified_label_tokens
from nexum.core.compilation.model import DEFAULT_RELEVANCE_FLOOR, CompileInput, ContextItem, Fold, Step
from nexum.core.compilation.ranking import (
    RankedSection,
    RankedSections,
    evidence_by_kind,
    query_of,
    query_text,
    rank_section,
)
from nexum.core.compilation.rules import folds_required
from nexum.core.compilation.versions import COMPILER_VERSION
from nexum.core.tokens import TokenCounter
from nexum.core.world.entities import entities_of
from nexum.eventstore.replica import read_connection
from tasks_app.models import Task

VECTORS_FROM = 5
"""The first compiler version that ranks by meaning: older versions compile (and replay) without vectors."""
EVIDENCE_VECTOR_MEMO = 4096


@dataclass(frozen=True)
class TaskContextInput:
    """The compiler's input for one task, its sections ranked, and where its evidence came from."""

    compile_input: CompileInput
    sections: RankedSections
    bundle_digest: str | None
    embedded: tuple[NewVector, ...] = ()
    """Vectors made for stored items that had none by the compile's embedder: the compile stores them."""


def compile_input_for(
    *,
    task: Task,
    encoding: str,
    counter: TokenCounter,
    extra_evidence: Sequence[Mapping[str, Any]] = (),
    compaction_threshold: int | None = None,
    version: int = COMPILER_VERSION,
    focus: str = "",
    relevance_floor: float = DEFAULT_RELEVANCE_FLOOR,
    embedder: Embedder | None = None,
) -> TaskContextInput:
    """Goal, step, its parent step's objective, constraints and criteria from the task graph, the request's
    ``focus`` and ``relevance_floor``; vectors by ``embedder`` from ``VECTORS_FROM`` (the items', the
    query's); state items of the goal and task; the
    task's folds with the items they folded and their summaries (the compiler shows one or the other: the
    folds ``compaction_threshold`` needs as summaries, the others as their entries when they fit); tools
    as the task sees them; evidence from tool calls, the latest check runs, the resolver's bundle and
    ``extra_evidence``. Traced as two phases of the compile: ``read``, then ``rank``."""
    with telemetry.phase_span("read"):
        read = _read_input(
            task=task,
            encoding=encoding,
            counter=counter,
            extra_evidence=extra_evidence,
            compaction_threshold=compaction_threshold,
            version=version,
            focus=focus,
            relevance_floor=relevance_floor,
            embedder=embedder,
        )
    with telemetry.phase_span("rank"):
        ranked = _ranked_sections(
            task,
            encoding,
            counter,
            read.compile_input,
            read.sections,
            read.bundle_facts,
            read.folded_progress,
            read.extra,
            version,
        )
    return TaskContextInput(read.compile_input, ranked, read.bundle_digest, read.embedded)


class _ReadInput(NamedTuple):
    """The compiler's input as read, with the parts its sections are ranked from."""

    compile_input: CompileInput
    sections: Mapping[str, tuple[ContextItem, ...]]
    bundle_facts: tuple[ContextItem, ...]
    folded_progress: tuple[ContextItem, ...]
    extra: tuple[ContextItem, ...]
    bundle_digest: str | None
    embedded: tuple[NewVector, ...]


def _read_input(
    *,
    task: Task,
    encoding: str,
    counter: TokenCounter,
    extra_evidence: Sequence[Mapping[str, Any]],
    compaction_threshold: int | None,
    version: int,
    focus: str,
    relevance_floor: float,
    embedder: Embedder | None,
) -> _ReadInput:
    goal = task if task.is_goal else Task.objects.get(id=task.goal_id)
    embedder = embedder if version >= VECTORS_FROM else None
    embedded: list[NewVector] = []
    candidates = CANDIDATES.refresh(
        task=task, encoding=encoding, counter=counter, embedder=embedder, embedded=embedded
    )
    sections = candidates.sections
    folds, folded_progress, folded_calls, required = _folds(
        task, candidates, encoding, counter, compaction_threshold, embedder, embedded
    )
    bundle_digest, bundle_items = latest_bundle_items(str(task.id), counter)
    unstored = (
        *check_run_evidence(str(task.id), counter),
        *bundle_items,
        *request_evidence_items(extra_evidence, counter),
    )
    unstored_texts = [item.text or "" for item in unstored]
    bundle_facts = tuple(item for item in unstored if item.kind == "fact")
    extra = (*folded_calls, *(item for item in unstored if item.kind != "fact"))
    constraints = list(dict.fromkeys([*goal.constraints, *(() if task.is_goal else task.constraints)]))
    parent_objective = (
        Task.objects.filter(id=task.parent_id).values_list("objective", flat=True).first() or ""
        if task.parent_id and task.parent_id != task.goal_id
        else ""
    )
    compile_input = CompileInput(
        goal=goal.objective,
        step=Step(id=task.key or str(task.id), objective=task.objective, inputs=tuple(task.inputs)),
        constraints=tuple(constraints),
        success_criteria=tuple(task.success_criteria),
        failures=sections["failure"],
        decisions=sections["decision"],
        facts=sections["fact"] + bundle_facts,
        artifacts=sections["artifact"],
        progress=sections["progress"] + folded_progress,
        evidence=sections["diagnostic"] + extra,
        folds=folds,
        folds_required=required,
        parent_objective=parent_objective,
        focus=focus,
        relevance_floor=relevance_floor,
        tools=tuple(
            tool_specs(
                tools_for_scope(
                    project_id=str(task.project_id),
                    goal_id=str(task.goal_id),
                    task_id=None if task.is_goal else str(task.id),
                )
            )
        ),
    )
    if embedder is not None:
        query_vector, *vectors = _evidence_vectors(embedder, [query_text(compile_input), *unstored_texts])
        unstored = tuple(
            dataclasses.replace(item, vector=vector, entities=entities_of(text))
            for item, text, vector in zip(unstored, unstored_texts, vectors, strict=True)
        )
        bundle_facts = tuple(item for item in unstored if item.kind == "fact")
        extra = (*folded_calls, *(item for item in unstored if item.kind != "fact"))
        compile_input = dataclasses.replace(
            compile_input,
            facts=sections["fact"] + bundle_facts,
            evidence=sections["diagnostic"] + extra,
            query_vector=query_vector,
            embedder=embedder_id(embedder),
        )
    return _ReadInput(
        compile_input, sections, bundle_facts, folded_progress, extra, bundle_digest, tuple(embedded)
    )


_EVIDENCE_VECTORS: OrderedDict[tuple[str, bytes], bytes] = OrderedDict()
"""Vectors by (embedder id, sha256 of the text): the memo keeps digests, not the texts themselves."""
_EVIDENCE_VECTORS_LOCK = threading.Lock()


def _evidence_vectors(embedder: Embedder, texts: Sequence[str]) -> list[bytes]:
    """The vectors of ``texts`` by ``embedder``, the ones not seen lately made in one ``embed`` call (a
    bundle's items and the latest check runs come back compile after compile; a text's vector never
    changes)."""
    name = embedder_id(embedder)
    keys = [(name, hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()) for text in texts]
    with _EVIDENCE_VECTORS_LOCK:
        known = {key: _EVIDENCE_VECTORS.get(key) for key in keys}
    missing = {key: text for key, text in zip(keys, texts, strict=True) if known[key] is None}
    if missing:
        made = dict(zip(missing, embedder.embed(list(missing.values())), strict=True))
        known.update(made)
        with _EVIDENCE_VECTORS_LOCK:
            _EVIDENCE_VECTORS.update(made)
            while len(_EVIDENCE_VECTORS) > EVIDENCE_VECTOR_MEMO:
                _EVIDENCE_VECTORS.popitem(last=False)
    return [known[key] for key in keys]  # type: ignore[misc]


def _folds(
    task: Task,
    candidates: TaskCandidates,
    encoding: str,
    counter: TokenCounter,
    threshold: int | None,
    embedder: Embedder | None = None,
    embedded: list[NewVector] | None = None,
) -> tuple[tuple[Fold, ...], tuple[ContextItem, ...], tuple[ContextItem, ...], int]:
    """The task's folds (oldest first), the progress notes and tool calls they folded (which the candidate
    list leaves out), and how many folds ``threshold`` needs shown as summaries (``folds_required``)."""
    if not candidates.folded:
        return (), (), (), 0
    rows = list(
        CompactionFold.objects.filter(task_id=task.id)
        .order_by("position")
        .values_list("summary_id", "folded_ids")
    )
    originals = CANDIDATES.items_of(
        changed_rows(task, encoding, -1, ids=candidates.folded, embedder=embedder_id(embedder)),
        counter,
        embedder=embedder,
        embedded=embedded,
    )
    own = {item.id: item for item in candidates.compacted_items()}
    own.update((item.id, item) for item in originals)
    folds = tuple(
        Fold(
            (own[str(summary_id)].kind, str(summary_id)),
            tuple((own[item_id].kind, item_id) for item_id in folded_ids if item_id in own),
        )
        for summary_id, folded_ids in rows
        if str(summary_id) in own
    )
    required = folds_required(
        own_tokens={item_id: item.token_count for item_id, item in own.items()},
        folds=[(fold.summary[1], [item_id for _, item_id in fold.folded]) for fold in folds],
        threshold=threshold,
    )
    ordered = sorted(originals, key=lambda item: item.id)
    return (
        folds,
        tuple(item for item in ordered if item.kind == "progress"),
        tuple(item for item in ordered if item.kind == "diagnostic"),
        required,
    )


def _ranked_sections(
    task: Task,
    encoding: str,
    counter: TokenCounter,
    compile_input: CompileInput,
    sections: Mapping[str, tuple[ContextItem, ...]],
    bundle_facts: tuple[ContextItem, ...],
    folded_progress: tuple[ContextItem, ...],
    extra: tuple[ContextItem, ...],
    version: int,
) -> RankedSections:
    """The input's sections ranked for the compiler (``rank_sections``) by renderer ``version``, each kept by
    the candidate cache while its candidates, the items joined to it, the query and the floor stay equal."""
    query, label = query_of(compile_input, version), verified_label_tokens(counter)
    floor = compile_input.relevance_floor
    extra_by_kind = evidence_by_kind(extra)
    rank = partial(rank_section, query=query, verified_label=label, version=version, floor=floor)

    def ranked(kind: str, joined: tuple[ContextItem, ...] = ()) -> RankedSection:
        return CANDIDATES.ranked(
            task=task,
            encoding=encoding,
            kind=kind,
            base=sections[kind],
            extra=joined,
            context=(query, label, version, floor, compile_input.embedder, compile_input.query_vector),
            rank=partial(rank, kind),
            embedder=compile_input.embedder,
        )

    return RankedSections(
        diagnostic=ranked("diagnostic", extra_by_kind["diagnostic"]),
        code=rank("code", extra_by_kind["code"]),
        failure=ranked("failure"),
        decision=ranked("decision"),
        fact=ranked("fact", bundle_facts),
        artifact=ranked("artifact"),
        progress=ranked("progress", folded_progress),
    )


def item_text_loader(items: Sequence[ContextItem]) -> dict[tuple[str, str], str]:
    """The rendered texts of the given (included) world-state items, in one query."""
    wanted = {}
    for item in items:
        try:
            wanted[uuid.UUID(item.id)] = item
        except ValueError:
            continue
    texts: dict[tuple[str, str], str] = {}
    if read_connection.vendor == "postgresql":
        by_text = {str(key): item for key, item in wanted.items()}
        table = read_connection.ops.quote_name(WorldItem._meta.db_table)
        with read_connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id::text, rendered FROM {table} WHERE id = ANY(%s::uuid[])", [list(by_text)]
            )
            for item_id, rendered in cursor.fetchall():
                item = by_text[item_id]
                texts[(item.kind, item.id)] = rendered
        return texts
    for item_id, rendered in WorldItem.objects.filter(id__in=list(wanted)).values_list("id", "rendered"):
        item = wanted[item_id]
        texts[(item.kind, item.id)] = rendered
    return texts
