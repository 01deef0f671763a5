"""Reads for the compile service: the compiler's input as the world state stands now (or as of a past
position inside ``state_as_of``), stored contexts, the compile history of a task, and the diff of two
contexts.

Speed (issue 5, item 2). Candidate items are metadata only (id, kind, the stored token count in the
compile's encoding, line count, position, verified, trust, origin). A task's candidates are kept in process
(``task_candidates``) and brought up to date by reading only the rows of its goal that changed since
(``changed_position``, indexed): a compile in an agent loop reads the few items recorded since the last call,
not the world. The texts of the items the compiler includes are fetched afterwards in one query
(``item_text_loader``). Nothing is tokenized here but the texts that are not stored world-state items
(check-run output, request and bundle evidence).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import BooleanField, Case, ExpressionWrapper, F, Q, QuerySet, TextField, Value, When
from django.db.models.expressions import RawSQL

from context_app.compilation.models import (
    CompactionFold,
    CompileEvidence,
    ContextCompilation,
    FoldedItem,
    StoredContext,
)
from context_app.resolution import selectors as resolution_selectors
from context_app.world.models import WorldItem
from context_app.world.selectors import tool_specs, tools_for_scope
from nexum.core import world
from nexum.core.budgets import ModelBudget
from nexum.core.compilation.compiler import (
    CompiledContext,
    CompileInput,
    ContextItem,
    ExclusionRun,
    SectionTokens,
    Step,
    Truncation,
)
from nexum.core.compilation.rules import COMPACTED_KINDS, ContextDiff, diff_contexts
from nexum.core.errors import NotFound
from nexum.core.memo import remembered
from nexum.core.tokens import TokenCounter
from nexum.eventstore.models import Event
from nexum.ids import uuid_or_none
from tasks_app.models import Task
from verification_app import selectors as verification_selectors

RANKED_KINDS = ("fact", "tool_call")  # ranked by relevance: their terms are needed
CHECK_OUTPUT_CHARS = 4000


@dataclass(frozen=True)
class TaskContextInput:
    """The compiler's input for one task, and where its evidence came from."""

    compile_input: CompileInput
    bundle_digest: str | None


# --- the compiler's input ---------------------------------------------------------------------------------


def compile_input_for(
    *,
    task: Task,
    encoding: str,
    counter: TokenCounter,
    extra_evidence: Sequence[Mapping[str, Any]] = (),
) -> TaskContextInput:
    """Goal, step, constraints and criteria from the task graph; state items of the goal and task (folded
    ones left out, the summaries in); tools as the task sees them; evidence from tool calls, the latest
    check runs, the resolver's bundle and ``extra_evidence``."""
    goal = task if task.is_goal else Task.objects.get(id=task.goal_id)
    sections = task_candidates(task=task, encoding=encoding, counter=counter).sections
    bundle_digest, bundle_items = _bundle_items(str(task.id), counter)
    facts = _joined(sections["fact"], tuple(item for item in bundle_items if item.kind == "fact"))
    extra = (
        *_check_run_evidence(str(task.id), counter),
        *(item for item in bundle_items if item.kind != "fact"),
        *request_evidence_items(extra_evidence, counter),
    )
    evidence = _joined(sections["diagnostic"], extra)
    constraints = list(dict.fromkeys([*goal.constraints, *(() if task.is_goal else task.constraints)]))
    compile_input = CompileInput(
        goal=goal.objective,
        step=Step(id=task.key or str(task.id), objective=task.objective, inputs=tuple(task.inputs)),
        constraints=tuple(constraints),
        success_criteria=tuple(task.success_criteria),
        failures=sections["failure"],
        decisions=sections["decision"],
        facts=facts,
        artifacts=sections["artifact"],
        progress=sections["progress"],
        evidence=evidence,
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
    return TaskContextInput(compile_input, bundle_digest)


def _joined(base: tuple[ContextItem, ...], extra: tuple[ContextItem, ...]) -> tuple[ContextItem, ...]:
    """``base + extra`` as one tuple object for the same ``base`` object and equal ``extra`` items (their
    texts too: item equality leaves the text out), so the compiler's per-tuple work still serves a section
    whose candidates did not change when the bundle's facts or the latest check runs are joined to it."""
    if not extra:
        return base
    return remembered(base, ("joined", extra, tuple(item.text for item in extra)), lambda _: base + extra)


def _seen_by(task: Task) -> Q:
    """Which items of its goal a task sees: the shared ones and its own (a goal sees the shared ones)."""
    shared = Q(task_id__isnull=True)
    return shared if task.is_goal else shared | Q(task_id=task.id)


def _task_items(task: Task) -> Any:
    """The items the task sees (its goal's shared ones and its own, current facts only), folded ones out."""
    items = WorldItem.objects.filter(
        _seen_by(task),
        project_id=task.project_id,
        goal_id=task.goal_id,
        status=world.FACT_CURRENT,
    )
    folded = FoldedItem.objects.filter(task_id=task.id).values("item_id")
    return items.exclude(id__in=folded)


def stored_tokens(encoding: str) -> RawSQL:
    """A world item's stored token count in ``encoding`` as an integer (NULL when not counted), read by the
    database so no ``token_counts`` JSON is decoded in Python."""
    table = connection.ops.quote_name(WorldItem._meta.db_table)
    if connection.vendor == "postgresql":
        return RawSQL(f"({table}.token_counts ->> %s)::integer", (encoding,))
    return RawSQL(f"json_extract({table}.token_counts, %s)", (f'$."{encoding}"',))


def _id_text() -> RawSQL:
    table = connection.ops.quote_name(WorldItem._meta.db_table)
    return RawSQL(f"{table}.id::text" if connection.vendor == "postgresql" else f"{table}.id", ())


def _changed_rows(task: Task, encoding: str, since: int) -> list[tuple[Any, ...]]:
    """The metadata of every item the task sees whose row changed after log position ``since`` (whatever
    its status now), in one query on the ``(goal_id, changed_position)`` index, which covers it on PostgreSQL
    (a goal id is unique across projects, so no other index can serve it): id as text, kind, stored token
    count of ``encoding`` as an integer, line count, position, verified, trust class, origin, whether it is
    the task's own (a boolean: no UUID object per row), status, and the terms of the kinds ranked by
    relevance (empty for the others)."""
    rows = (
        WorldItem.objects.filter(
            _seen_by(task),
            goal_id=task.goal_id,
            changed_position__gt=since,
        )
        .annotate(
            item_text_id=_id_text(),
            tokens=stored_tokens(encoding),
            own=ExpressionWrapper(Q(task_id__isnull=False), output_field=BooleanField()),
            ranked_terms=Case(
                When(kind__in=RANKED_KINDS, then=F("terms_text")), default=Value(""), output_field=TextField()
            ),
        )
        .values_list(
            "item_text_id",
            "kind",
            "tokens",
            "line_count",
            "position",
            "verified",
            "trust_class",
            "source",
            "own",
            "status",
            "ranked_terms",
        )
        .order_by()
    )
    sql, params = rows.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


class _Marks(NamedTuple):
    """Where a task's candidates stood: the last log position that changed a row of its goal and the
    position of its last fold (-1: none), each with the stream and version of the event at that position
    (its fingerprint: a position a rolled-back transaction used is gone, or, on SQLite, reused by another
    event)."""

    high: int
    high_event: str | None
    fold_high: int
    fold_event: str | None


_NO_MARKS = _Marks(-1, None, -1, None)


def _marks(task: Task, known: _Marks) -> tuple[_Marks, _Marks]:
    """The task's marks now, and the fingerprints of the events at the ``known`` marks' positions now, in
    one query of index probes."""
    items = connection.ops.quote_name(WorldItem._meta.db_table)
    folds = connection.ops.quote_name(CompactionFold._meta.db_table)
    events = connection.ops.quote_name(Event._meta.db_table)
    goal_id, task_id = task.goal_id, task.id
    if connection.vendor != "postgresql":  # SQLite keeps UUIDs as 32 hex digits
        goal_id, task_id = uuid.UUID(str(goal_id)).hex, uuid.UUID(str(task_id)).hex

    def event_at(position: str) -> str:
        return f"(SELECT stream_id || '@' || CAST(version AS TEXT) FROM {events} WHERE position = {position})"

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT h.p, {event_at('h.p')}, f.p, {event_at('f.p')}, {event_at('%s')}, {event_at('%s')}"
            f" FROM (SELECT MAX(changed_position) AS p FROM {items} WHERE goal_id = %s) AS h,"
            f" (SELECT MAX(position) AS p FROM {folds} WHERE task_id = %s) AS f",
            [known.high, known.fold_high, goal_id, task_id],
        )
        high, high_event, fold_high, fold_event, known_high_event, known_fold_event = cursor.fetchone()
    now = _Marks(
        -1 if high is None else int(high), high_event, -1 if fold_high is None else int(fold_high), fold_event
    )
    return now, known._replace(high_event=known_high_event, fold_event=known_fold_event)


def _canonical_uuid(value: Any) -> str:
    text = str(value)
    if len(text) == 32:  # SQLite keeps UUIDs as 32 hex digits
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
    return text


# Candidates as built from their metadata rows, keyed by the row itself (everything the item is made of), so
# a hit is exactly the item the row describes: the tasks of one goal share the items of the rows they share.
_ITEMS: dict[tuple[Any, ...], ContextItem] = {}
_ITEMS_MAX = 400_000


SECTION_KINDS = ("failure", "decision", "fact", "artifact", "progress", "diagnostic")


@dataclass(frozen=True)
class TaskCandidates:
    """A task's candidate items as of one state of its goal, per compiler section (tool calls are
    ``diagnostic``), and the ids of its own progress notes and tool calls (what compaction folds).

    ``marks`` are where the world stood when it was read (``_marks``); ``folded`` the ids the task's folds
    left out. Never changed once built: a newer
    state is a new value that shares the sections that did not change, so the compiler's orderings of those
    (kept per section tuple) stay valid.
    """

    marks: _Marks
    folded: frozenset[str]
    by_kind: Mapping[str, Mapping[str, ContextItem]]
    sections: Mapping[str, tuple[ContextItem, ...]]
    compacted: frozenset[str]

    @property
    def items(self) -> tuple[ContextItem, ...]:
        return tuple(item for kind in SECTION_KINDS for item in self.sections[kind])

    def compacted_items(self) -> list[ContextItem]:
        """The task's own progress notes and tool calls (``diagnostic`` here), each with its token count."""
        return [
            item
            for kind in ("progress", "diagnostic")
            for item_id, item in self.by_kind[kind].items()
            if item_id in self.compacted
        ]


_EMPTY = TaskCandidates(
    _NO_MARKS,
    frozenset(),
    {kind: {} for kind in SECTION_KINDS},
    {kind: () for kind in SECTION_KINDS},
    frozenset(),
)

# Candidate lists kept in process per (database, encoding, task). A compile reads the task's marks; when
# they have not moved the list is served as is, when they moved forward only the rows changed since (and
# the folds made since) are read, by index, and applied, and when they moved back (a replay inside
# ``state_as_of``, or read models rebuilt to an older position) the list is read whole. Rows never leave a
# goal, each change of a row sets its ``changed_position`` to the position of its event, and folds are only
# ever added, so equal marks mean an equal world for the task. A list read inside a transaction that wrote
# the goal's rows (a compile that folded, then failed) may hold rows that were rolled back: its marks are
# then positions whose events are gone (or another event's), so it is read whole again.
_TASKS: OrderedDict[tuple[Any, ...], TaskCandidates] = OrderedDict()
_TASKS_MAX = 32
_TASKS_LOCK = threading.Lock()


def task_candidates(*, task: Task, encoding: str, counter: TokenCounter) -> TaskCandidates:
    """The candidates of ``task`` as the world stands (``TaskCandidates``), read incrementally."""
    key = (
        connection.alias,
        connection.settings_dict.get("NAME"),
        encoding,
        str(task.id),
        str(task.project_id),
        str(task.goal_id),
        task.is_goal,
    )
    with _TASKS_LOCK:
        entry = _TASKS.get(key)
    known = _NO_MARKS if entry is None else entry.marks
    now, known_now = _marks(task, known)
    if entry is None or known_now != known or now.high < known.high or now.fold_high < known.fold_high:
        entry = _EMPTY  # not read yet, built on a rolled-back write, or the world moved back: read it whole
    elif now == known:
        with _TASKS_LOCK:
            if key in _TASKS:
                _TASKS.move_to_end(key)
        return entry
    entry = _refreshed(entry, task, encoding, counter, now)
    with _TASKS_LOCK:
        _TASKS[key] = entry
        _TASKS.move_to_end(key)
        while len(_TASKS) > _TASKS_MAX:
            _TASKS.popitem(last=False)
    return entry


def candidate_items(*, task: Task, encoding: str, counter: TokenCounter) -> list[ContextItem]:
    """Every candidate world-state item of ``task`` as metadata (``text`` None: loaded when included).

    Tool calls become ``diagnostic`` evidence. An item without a stored count in ``encoding`` (recorded
    before that encoding was configured) is counted from its rendered text.
    """
    return list(task_candidates(task=task, encoding=encoding, counter=counter).items)


def _refreshed(
    entry: TaskCandidates, task: Task, encoding: str, counter: TokenCounter, now: _Marks
) -> TaskCandidates:
    """``entry`` with the rows changed since its marks applied (and newly folded items taken out)."""
    folded = entry.folded
    by_kind = dict(entry.by_kind)
    compacted = entry.compacted
    touched: set[str] = set()

    def writable(kind: str) -> dict[str, ContextItem]:
        if kind not in touched:
            touched.add(kind)
            by_kind[kind] = dict(by_kind[kind])
        return by_kind[kind]  # type: ignore[return-value]

    if now.fold_high > entry.marks.fold_high:
        new_folds = CompactionFold.objects.filter(task_id=task.id, position__gt=entry.marks.fold_high)
        newly = {str(item_id) for ids in new_folds.values_list("folded_ids", flat=True) for item_id in ids}
        folded = folded | newly
        compacted = compacted - newly
        for item_id in newly:
            for kind in SECTION_KINDS:
                if item_id in by_kind[kind]:
                    del writable(kind)[item_id]
    rows = _changed_rows(task, encoding, entry.marks.high) if now.high > entry.marks.high else []
    if rows:
        own = set(compacted)
        live = []
        for row in rows:
            item_id = _canonical_uuid(row[0])
            kind = "diagnostic" if row[1] == "tool_call" else row[1]
            if row[9] == world.FACT_CURRENT and item_id not in folded:
                live.append(row)
            else:
                if item_id in by_kind[kind]:
                    del writable(kind)[item_id]
                own.discard(item_id)
        for row, item in zip(live, _items_of(live, counter), strict=True):
            writable(item.kind)[item.id] = item
            if row[8] and row[1] in COMPACTED_KINDS and not task.is_goal:
                own.add(item.id)
        compacted = frozenset(own)
    sections = {
        kind: tuple(by_kind[kind].values()) if kind in touched else entry.sections[kind]
        for kind in SECTION_KINDS
    }
    return TaskCandidates(now, folded, by_kind, sections, compacted)


def _items_of(rows: Sequence[tuple[Any, ...]], counter: TokenCounter) -> list[ContextItem]:
    """The items the metadata rows describe (from ``_ITEMS`` when seen before)."""
    pg = connection.vendor == "postgresql"
    items: list[ContextItem | None] = list(map(_ITEMS.get, rows))
    missing = [index for index, item in enumerate(items) if item is None]
    if not missing:
        return items  # type: ignore[return-value]
    intern = sys.intern
    if len(_ITEMS) + len(missing) > _ITEMS_MAX:
        _ITEMS.clear()
    uncounted: list[int] = []
    for index in missing:
        row = rows[index]
        item_id, kind, tokens, lines, position, verified, trust_class, source, _, _, terms = row
        item_id = item_id if pg else _canonical_uuid(item_id)
        item = ContextItem(
            "diagnostic" if kind == "tool_call" else kind,
            item_id,
            0 if tokens is None else int(tokens),
            lines,
            position,
            bool(verified),
            tuple(map(intern, terms.split(" "))) if terms else (),  # interned: a vocabulary repeats
            trust_class,
            source or None,
        )
        items[index] = item
        if tokens is None:
            uncounted.append(index)
        else:
            _ITEMS[row] = item
    if uncounted:
        _count_uncounted(items, uncounted, counter)  # type: ignore[arg-type]
    return items  # type: ignore[return-value]


def _count_uncounted(items: list[ContextItem], uncounted: Sequence[int], counter: TokenCounter) -> None:
    rendered = dict(
        WorldItem.objects.filter(id__in=[uuid.UUID(items[index].id) for index in uncounted]).values_list(
            "id", "rendered"
        )
    )
    for index in uncounted:
        item = items[index]
        items[index] = dataclasses.replace(item, token_count=counter.count(rendered[uuid.UUID(item.id)]))


def item_text_loader(items: Sequence[ContextItem]) -> dict[tuple[str, str], str]:
    """The rendered texts of the given (included) world-state items, in one query."""
    wanted = {}
    for item in items:
        try:
            wanted[uuid.UUID(item.id)] = item
        except ValueError:
            continue
    texts: dict[tuple[str, str], str] = {}
    if connection.vendor == "postgresql":
        by_text = {str(key): item for key, item in wanted.items()}
        table = connection.ops.quote_name(WorldItem._meta.db_table)
        with connection.cursor() as cursor:
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


def request_evidence_items(evidence: Sequence[Mapping[str, Any]], counter: TokenCounter) -> list[ContextItem]:
    """Evidence a compile request supplied (already validated by the service), ids prefixed ``request:``."""
    return [
        ContextItem.from_text(
            entry["kind"],
            f"request:{entry['id']}",
            entry["text"],
            counter=counter,
            trust_class=entry.get("trust_class") or world.DEFAULT_TRUST_CLASS,
            origin=entry.get("origin") or None,
        )
        for entry in evidence
    ]


def _check_run_evidence(task_id: str, counter: TokenCounter) -> list[ContextItem]:
    """The latest completion request's check runs, as diagnostics (the end of a long log kept)."""
    items = []
    for run in verification_selectors.latest_check_runs(task_id=task_id):
        output = run["output"] or ""
        if len(output) > CHECK_OUTPUT_CHARS:  # the end of a log is where the error is
            output = "…" + output[-CHECK_OUTPUT_CHARS:]
        verdict = "passed" if run["passed"] else "failed"
        head = f"Check {run['name']}: {verdict}" + (f" ({run['reason']})" if run["reason"] else "")
        text = f"{head}\n{output}".strip() if output.strip() else head
        items.append(ContextItem.from_text("diagnostic", f"check:{run['name']}", text, counter=counter))
    return items


def _bundle_items(task_id: str, counter: TokenCounter) -> tuple[str | None, list[ContextItem]]:
    """The resolver's latest bundle: its facts and code, each with its trust class and origin (a stale item's
    origin says so, as the resolver recorded it: "stale: observed 3 years ago (TTL 30 days)"), minus the
    items a human rejected when settling a conflict. Returns the bundle's digest too (recorded on the
    compiled context)."""
    bundle = resolution_selectors.latest_bundle(task_id=task_id)
    if bundle is None:
        return None, []
    items = [
        ContextItem.from_text(
            entry.kind,
            f"bundle:{entry.digest}",
            entry.text,
            counter=counter,
            trust_class=entry.trust_class,
            origin=f"{entry.origin}; stale: {entry.stale_reason}" if entry.stale_reason else entry.origin,
        )
        for entry in bundle.usable_items
        if entry.text.strip()
    ]
    return bundle.digest, items


# --- stored contexts --------------------------------------------------------------------------------------


def context_get(*, project_id: str, digest: Any) -> StoredContext:
    """A compiled context of the project by digest; another project's or an unknown one is ``NotFound``."""
    context = None
    if isinstance(digest, str) and len(digest) == 64:
        context = StoredContext.objects.filter(project_id=project_id, digest=digest).first()
    if context is None:
        raise NotFound(f"no compiled context {digest}", field="digest")
    return context


def compile_request_get(*, project_id: str, request_id: Any) -> ContextCompilation:
    compile_request = None
    parsed = uuid_or_none(request_id)
    if parsed is not None:
        compile_request = ContextCompilation.objects.filter(project_id=project_id, request_id=parsed).first()
    if compile_request is None:
        raise NotFound(f"no compile request {request_id}", field="request_id")
    return compile_request


def evidence_get(*, project_id: str, digest: str) -> list[dict[str, Any]]:
    row = CompileEvidence.objects.filter(project_id=project_id, digest=digest).first()
    if row is None:
        raise NotFound(f"no stored compile evidence {digest}", field="evidence_digest")
    return list(row.items)


def compiled_result(context: StoredContext) -> CompiledContext:
    """The core's view of a stored context (so ``excluded`` is built the one way the compiler builds it)."""
    return CompiledContext(
        prompt_block=context.prompt_block,
        tools=tuple(context.tools),
        included=tuple(tuple(pair) for pair in context.included),  # type: ignore[misc]
        exclusion_runs=tuple(
            ExclusionRun(kind, left, reason, tuple(ids), tuple(needed))
            for kind, left, reason, ids, needed in json.loads(context.exclusion_runs)
        ),
        truncated=tuple(Truncation(*record) for record in context.truncated),
        section_tokens=SectionTokens(**context.section_tokens),
        prompt_tokens=context.prompt_tokens,
        tool_tokens=context.tool_tokens,
        budget=ModelBudget(**context.budget),
        encoding=context.encoding,
        digest=context.digest,
        exclusion_runs_json=context.exclusion_runs,
    )


def task_compile_history(*, project_id: str, task_id: Any, after: int = 0) -> QuerySet[ContextCompilation]:
    """The task's finished compiles after log position ``after``, in the order they were recorded (by the
    position of their ``ContextCompiled`` event)."""
    return ContextCompilation.objects.filter(
        project_id=project_id, task_id=task_id, status="done", compiled_position__gt=after
    ).order_by("compiled_position")


def task_compilations(*, project_id: str, task_id: Any) -> list[ContextCompilation]:
    """The task's finished compiles, oldest first."""
    return list(
        ContextCompilation.objects.filter(project_id=project_id, task_id=task_id, status="done").order_by(
            "compiled_position"
        )
    )


def previous_context(context: StoredContext) -> StoredContext | None:
    """The context of the task's latest compile before this context's first compile that had a different
    digest (what the operator diffs against)."""
    first = (
        ContextCompilation.objects.filter(project_id=context.project_id, digest=context.digest)
        .exclude(compiled_position=None)
        .order_by("compiled_position")
        .values_list("compiled_position", flat=True)
        .first()
    )
    if first is None:
        return None
    digest = (
        ContextCompilation.objects.filter(
            project_id=context.project_id, task_id=context.task_id, status="done", compiled_position__lt=first
        )
        .exclude(digest=context.digest)
        .order_by("-compiled_position")
        .values_list("digest", flat=True)
        .first()
    )
    if digest is None:
        return None
    return StoredContext.objects.filter(project_id=context.project_id, digest=digest).first()


def context_diff(*, before: StoredContext, after: StoredContext) -> ContextDiff:
    """Which items (and tools) entered and left between two contexts, and why (C12)."""
    before_result, after_result = compiled_result(before), compiled_result(after)
    return diff_contexts(
        before_included=[*before_result.included, *(("tool", name) for name in before_result.tools)],
        before_excluded=_reasons(before_result),
        after_included=[*after_result.included, *(("tool", name) for name in after_result.tools)],
        after_excluded=_reasons(after_result),
    )


def _reasons(result: CompiledContext) -> dict[tuple[str, str], str]:
    return {(record.kind, record.id): record.reason for record in result.excluded}


def task_folds(*, project_id: str, task_id: Any) -> list[CompactionFold]:
    return list(CompactionFold.objects.filter(project_id=project_id, task_id=task_id).order_by("position"))


def section_rows(context: StoredContext) -> list[dict[str, Any]]:
    """Tokens per section against the budget, for the admin's bars."""
    budget = int(context.budget.get("context_tokens") or 1)
    rows = []
    for name in ("tools", "pinned", "evidence", "state"):
        tokens = int(context.section_tokens.get(name, 0))
        rows.append(
            {"name": name, "tokens": tokens, "percent": min(100.0, round(100.0 * tokens / budget, 1))}
        )
    used = context.total_tokens
    rows.append({"name": "total", "tokens": used, "percent": min(100.0, round(100.0 * used / budget, 1))})
    return rows


def iter_excluded(context: StoredContext, limit: int | None = None) -> Iterable[Any]:
    records = compiled_result(context).excluded
    return records if limit is None else records[:limit]
