"""Reads for the compile service: the compiler's input as the world state stands now (or as of a past
position inside ``state_as_of``), stored contexts, the compile history of a task, and the diff of two
contexts.

Speed (issue 5, item 2). Candidate items are read as metadata only (id, kind, the stored token count in the
compile's encoding, line count, position, verified, trust, origin), in one query, with folded items left out
by a subquery; the items built from those rows are kept in process (``_ITEMS``), so the relevance terms of the
kinds ranked by relevance are read only for rows not seen before. The texts of the items the compiler
includes are fetched afterwards in one query (``item_text_loader``). Nothing is tokenized here but the texts
that are not stored world-state items (check-run output, request and bundle evidence).
"""

from __future__ import annotations

import sys
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Count, Max, Q, Sum
from django.db.models.expressions import RawSQL

from context_app.compilation.models import (
    CompactionFold,
    CompiledContext,
    CompileEvidence,
    ContextCompilation,
    FoldedItem,
)
from context_app.models import WorldItem
from context_app.resolution import selectors as resolution_selectors
from context_app.selectors import tool_specs, tools_for_scope
from nexum.core import world
from nexum.core.budgets import ModelBudget
from nexum.core.compilation import COMPACTED_KINDS, ContextDiff, diff_contexts
from nexum.core.compiler import (
    CompiledContext as CompiledResult,
)
from nexum.core.compiler import (
    CompileInput,
    ContextItem,
    ExclusionRun,
    SectionTokens,
    Step,
    Truncation,
)
from nexum.core.errors import NotFound
from nexum.core.tokens import TokenCounter
from nexum.ids import uuid_or_none
from tasks_app.models import Task
from verification_app import selectors as verification_selectors

STATE_SECTIONS = {"failure": "failures", "decision": "decisions", "fact": "facts", "artifact": "artifacts"}
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
    state: dict[str, list[ContextItem]] = {kind: [] for kind in (*STATE_SECTIONS, "progress")}
    evidence: list[ContextItem] = []
    for item in candidate_items(task=task, encoding=encoding, counter=counter):
        if item.kind == "diagnostic":
            evidence.append(item)
        else:
            state[item.kind].append(item)
    evidence.extend(_check_run_evidence(str(task.id), counter))
    bundle_digest, bundle_items = _bundle_items(str(task.id), counter)
    for item in bundle_items:
        (state["fact"] if item.kind == "fact" else evidence).append(item)
    evidence.extend(request_evidence_items(extra_evidence, counter))
    constraints = list(dict.fromkeys([*goal.constraints, *(() if task.is_goal else task.constraints)]))
    compile_input = CompileInput(
        goal=goal.objective,
        step=Step(id=task.key or str(task.id), objective=task.objective, inputs=tuple(task.inputs)),
        constraints=tuple(constraints),
        success_criteria=tuple(task.success_criteria),
        failures=tuple(state["failure"]),
        decisions=tuple(state["decision"]),
        facts=tuple(state["fact"]),
        artifacts=tuple(state["artifact"]),
        progress=tuple(state["progress"]),
        evidence=tuple(evidence),
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


def _task_items(task: Task) -> Any:
    """The items the task sees (its goal's shared ones and its own, current facts only), folded ones out."""
    shared = Q(task_id__isnull=True)
    items = WorldItem.objects.filter(
        shared if task.is_goal else shared | Q(task_id=task.id),
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


def _terms_text() -> RawSQL:
    """The relevance terms joined by spaces, by the database (so no JSON is parsed in Python)."""
    table = connection.ops.quote_name(WorldItem._meta.db_table)
    if connection.vendor == "postgresql":
        return RawSQL(f"array_to_string(ARRAY(SELECT jsonb_array_elements_text({table}.terms)), ' ')", ())
    return RawSQL(f"(SELECT group_concat(value, ' ') FROM json_each({table}.terms))", ())


def _metadata_query(task: Task, encoding: str) -> tuple[str, Sequence[Any]]:
    """One SELECT of the candidates' metadata, shaped so the database does the work: the id as text and the
    stored token count of ``encoding`` as an integer. Terms are not read here (``_item_terms``)."""
    rows = (
        _task_items(task)
        .annotate(item_text_id=_id_text(), tokens=stored_tokens(encoding))
        .values_list(
            "item_text_id",
            "kind",
            "tokens",
            "line_count",
            "position",
            "verified",
            "trust_class",
            "source",
            "task_id",
        )
        .order_by()
    )
    sql, params = rows.query.sql_with_params()
    return sql, params


def _canonical_uuid(value: Any) -> str:
    text = str(value)
    if len(text) == 32:  # SQLite keeps UUIDs as 32 hex digits
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
    return text


# Candidates as built from their metadata rows, keyed by the row itself (id, kind, count, lines, position,
# verified, trust, origin): an item's terms never change after it is recorded (they come from its event), and
# any change to the rest gives a different key, so a hit is exactly the item the row describes. This saves
# reading the terms of every ranked candidate and building thousands of items on every compile of a task.
_ITEMS: dict[tuple[Any, ...], ContextItem] = {}
_ITEMS_MAX = 400_000
_TERMS_BY_ID_MAX = 500  # more misses than this: read the terms of all ranked candidates in one query


def _item_terms(task: Task, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The relevance terms of the given ranked candidates (interned: a vocabulary repeats across items)."""
    items = _task_items(task).filter(kind__in=RANKED_KINDS)
    if len(ids) <= _TERMS_BY_ID_MAX:
        items = WorldItem.objects.filter(id__in=[uuid.UUID(item_id) for item_id in ids])
    rows = items.annotate(item_text_id=_id_text(), terms_text=_terms_text()).values_list(
        "item_text_id", "terms_text"
    )
    intern = sys.intern
    return {
        _canonical_uuid(item_id): tuple(map(intern, terms.split(" "))) if terms else ()
        for item_id, terms in rows.order_by()
    }


@dataclass(frozen=True)
class TaskCandidates:
    """A task's candidate items in one world version, and the stored token total of the task's own progress
    notes and tool calls (what the compaction check compares with its threshold)."""

    items: tuple[ContextItem, ...]
    compacted_tokens: int
    compacted_counted: int
    compacted_items: int


# Candidate lists kept in process per (database, task, encoding, world version of the task). The world
# version is one aggregate over every item the task sees, whatever its status (count, highest position,
# latest change, sum of versions) and over the task's folded items: recording an item, verifying, retracting
# or superseding a fact (each sets the row's ``version`` and ``updated_at`` from its event) and folding all
# change it. Inside ``state_as_of`` the rebuilt rows are those of that position, so their version is that
# position's: an older state never meets a newer state's list. Only fully counted lists are kept.
_TASKS: OrderedDict[tuple[Any, ...], TaskCandidates] = OrderedDict()
_TASKS_MAX = 32


def world_version(task: Task) -> tuple[Any, ...]:
    """What changes whenever the candidate items of ``task`` may have changed (two indexed aggregates)."""
    shared = Q(task_id__isnull=True)
    totals = (
        WorldItem.objects.filter(
            shared if task.is_goal else shared | Q(task_id=task.id),
            project_id=task.project_id,
            goal_id=task.goal_id,
        )
        .order_by()
        .aggregate(items=Count("id"), top=Max("position"), changed=Max("updated_at"), versions=Sum("version"))
    )
    folded = FoldedItem.objects.filter(task_id=task.id).order_by().aggregate(folded=Count("item_id"))
    return (
        connection.alias,
        connection.settings_dict.get("NAME"),
        str(task.id),
        str(task.project_id),
        str(task.goal_id),
        task.is_goal,
        totals["items"],
        totals["top"],
        str(totals["changed"]),
        totals["versions"],
        folded["folded"],
    )


def task_candidates(*, task: Task, encoding: str, counter: TokenCounter) -> TaskCandidates:
    """The candidates of ``task`` (``candidate_items``) with its compaction totals, from the in-process list
    when the task's world version has not moved since it was built."""
    key = (encoding, *world_version(task))
    entry = _TASKS.get(key)
    if entry is not None:
        _TASKS.move_to_end(key)
        return entry
    entry, complete = _build_candidates(task, encoding, counter)
    if complete:
        _TASKS[key] = entry
        while len(_TASKS) > _TASKS_MAX:
            _TASKS.popitem(last=False)
    return entry


def candidate_items(*, task: Task, encoding: str, counter: TokenCounter) -> list[ContextItem]:
    """Every candidate world-state item of ``task`` as metadata (``text`` None: loaded when included).

    Tool calls become ``diagnostic`` evidence. An item without a stored count in ``encoding`` (recorded
    before that encoding was configured) is counted from its rendered text here.
    """
    return list(task_candidates(task=task, encoding=encoding, counter=counter).items)


def _build_candidates(task: Task, encoding: str, counter: TokenCounter) -> tuple[TaskCandidates, bool]:
    sql, params = _metadata_query(task, encoding)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    pg = connection.vendor == "postgresql"
    compacted_tokens = compacted_counted = compacted_items = 0
    if not task.is_goal:
        for row in rows:
            if row[8] is not None and row[1] in COMPACTED_KINDS:
                compacted_items += 1
                if row[2] is not None:
                    compacted_counted += 1
                    compacted_tokens += int(row[2])
    cached = _ITEMS.get
    items: list[ContextItem | None] = list(map(cached, rows))
    missing = [index for index, item in enumerate(items) if item is None]
    uncounted: list[int] = []
    if missing:
        ranked = [rows[index] for index in missing if rows[index][1] in RANKED_KINDS]
        terms = _item_terms(task, [_canonical_uuid(row[0]) for row in ranked]) if ranked else {}
        if len(_ITEMS) + len(missing) > _ITEMS_MAX:
            _ITEMS.clear()
        for index in missing:
            row = rows[index]
            item_id, kind, tokens, lines, position, verified, trust_class, source, _ = row
            item_id = item_id if pg else _canonical_uuid(item_id)
            item = ContextItem(
                "diagnostic" if kind == "tool_call" else kind,
                item_id,
                0 if tokens is None else int(tokens),
                lines,
                position,
                bool(verified),
                terms.get(item_id, ()) if kind in RANKED_KINDS else (),
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
    entry = TaskCandidates(
        tuple(items),  # type: ignore[arg-type]
        compacted_tokens,
        compacted_counted,
        compacted_items,
    )
    return entry, not uncounted


def _count_uncounted(items: list[ContextItem], uncounted: Sequence[int], counter: TokenCounter) -> None:
    rendered = dict(
        WorldItem.objects.filter(id__in=[uuid.UUID(items[index].id) for index in uncounted]).values_list(
            "id", "rendered"
        )
    )
    for index in uncounted:
        item = items[index]
        text = rendered[uuid.UUID(item.id)]
        items[index] = ContextItem(
            item.kind,
            item.id,
            counter.count(text),
            item.line_count,
            item.position,
            item.verified,
            item.terms,
            item.trust_class,
            item.origin,
            text,
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
    """The resolver's latest bundle: its facts and code, each with its trust class and origin, minus the
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
            origin=entry.origin,
        )
        for entry in bundle.usable_items
        if entry.text.strip()
    ]
    return bundle.digest, items


# --- stored contexts --------------------------------------------------------------------------------------


def context_get(*, project_id: str, digest: Any) -> CompiledContext:
    """A compiled context of the project by digest; another project's or an unknown one is ``NotFound``."""
    context = None
    if isinstance(digest, str) and len(digest) == 64:
        context = CompiledContext.objects.filter(project_id=project_id, digest=digest).first()
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


def compiled_result(context: CompiledContext) -> CompiledResult:
    """The core's view of a stored context (so ``excluded`` is built the one way the compiler builds it)."""
    return CompiledResult(
        prompt_block=context.prompt_block,
        tools=tuple(context.tools),
        included=tuple(tuple(pair) for pair in context.included),  # type: ignore[misc]
        exclusion_runs=tuple(
            ExclusionRun(kind, left, reason, tuple(ids), tuple(needed))
            for kind, left, reason, ids, needed in context.exclusion_runs
        ),
        truncated=tuple(Truncation(*record) for record in context.truncated),
        section_tokens=SectionTokens(**context.section_tokens),
        prompt_tokens=context.prompt_tokens,
        tool_tokens=context.tool_tokens,
        budget=ModelBudget(**context.budget),
        encoding=context.encoding,
        digest=context.digest,
    )


def task_compilations(*, project_id: str, task_id: Any) -> list[ContextCompilation]:
    """The task's finished compiles, oldest first."""
    return list(
        ContextCompilation.objects.filter(project_id=project_id, task_id=task_id, status="done").order_by(
            "compiled_position"
        )
    )


def previous_context(context: CompiledContext) -> CompiledContext | None:
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
    return CompiledContext.objects.filter(project_id=context.project_id, digest=digest).first()


def context_diff(*, before: CompiledContext, after: CompiledContext) -> ContextDiff:
    """Which items (and tools) entered and left between two contexts, and why (C12)."""
    before_result, after_result = compiled_result(before), compiled_result(after)
    return diff_contexts(
        before_included=[*before_result.included, *(("tool", name) for name in before_result.tools)],
        before_excluded=_reasons(before_result),
        after_included=[*after_result.included, *(("tool", name) for name in after_result.tools)],
        after_excluded=_reasons(after_result),
    )


def _reasons(result: CompiledResult) -> dict[tuple[str, str], str]:
    return {(record.kind, record.id): record.reason for record in result.excluded}


def task_folds(*, project_id: str, task_id: Any) -> list[CompactionFold]:
    return list(CompactionFold.objects.filter(project_id=project_id, task_id=task_id).order_by("position"))


def section_rows(context: CompiledContext) -> list[dict[str, Any]]:
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


def iter_excluded(context: CompiledContext, limit: int | None = None) -> Iterable[Any]:
    records = compiled_result(context).excluded
    return records if limit is None else records[:limit]
