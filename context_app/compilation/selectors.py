"""Reads for the compile service: the compiler's input as the world state stands now (or as of a past
position inside ``state_as_of``), stored contexts, the compile history of a task, and the diff of two
contexts.

Speed (issue 5, item 2; issue 15). Candidate items are metadata only, kept in process with their rankings
and brought up to date incrementally by the candidate cache (``candidates.CANDIDATES``): a compile in an
agent loop reads the few items recorded since the last call, not the world, and ranks again only the
sections that changed. The texts of the items the compiler includes are fetched afterwards in one query
(``item_text_loader``). Nothing is tokenized here but the texts that are not stored world-state items
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
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import partial
from typing import Any, NamedTuple

from django.conf import settings
from django.db.models import Count, QuerySet, Sum

from context_app.compilation.candidates import CANDIDATES, TaskCandidates, changed_rows
from context_app.compilation.models import (
    CompactionFold,
    CompileEvidence,
    ContextCompilation,
    ContextUsage,
    StoredContext,
)
from context_app.resolution import selectors as resolution_selectors
from context_app.world.models import WorldItem
from context_app.world.selectors import tool_specs, tools_for_scope
from context_app.world.vectors import NewVector
from nexum.adapters import telemetry
from nexum.adapters.embedding import Embedder, embedder_id
from nexum.core.catalog.budgets import ModelBudget
from nexum.core.catalog.usage import DriftSummary, summarize_drift
from nexum.core.compilation.costs import verified_label_tokens
from nexum.core.compilation.exclusions import ExclusionRun
from nexum.core.compilation.model import (
    DEFAULT_RELEVANCE_FLOOR,
    CompiledContext,
    CompileInput,
    ContextItem,
    Fold,
    SectionTokens,
    Step,
    Truncation,
)
from nexum.core.compilation.ranking import (
    RankedSection,
    RankedSections,
    evidence_by_kind,
    query_of,
    query_text,
    rank_section,
)
from nexum.core.compilation.rules import ContextDiff, diff_contexts, folds_required
from nexum.core.compilation.versions import COMPILER_VERSION
from nexum.core.durations import human_age
from nexum.core.errors import NotFound
from nexum.core.ids import uuid_or_none
from nexum.core.tokens import TokenCounter
from nexum.core.world.entities import entities_of
from nexum.core.world.items import DEFAULT_TRUST_CLASS
from nexum.eventstore.replica import read_connection
from tasks_app.models import Task
from verification_app import selectors as verification_selectors

CHECK_RUN_ORIGIN = "verification gate, latest completion request"
REQUEST_EVIDENCE_ORIGIN = "supplied with the compile request"
JUST_NOW_SECONDS = 60
CHECK_OUTPUT_CHARS = 4000
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


# --- the compiler's input ---------------------------------------------------------------------------------


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
    bundle_digest, bundle_items = _bundle_items(str(task.id), counter)
    unstored = (
        *_check_run_evidence(str(task.id), counter),
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


def request_evidence_items(evidence: Sequence[Mapping[str, Any]], counter: TokenCounter) -> list[ContextItem]:
    """Evidence a compile request supplied (already validated by the service), ids prefixed ``request:``."""
    return [
        ContextItem.from_text(
            entry["kind"],
            f"request:{entry['id']}",
            entry["text"],
            counter=counter,
            trust_class=entry.get("trust_class") or DEFAULT_TRUST_CLASS,
            origin=entry.get("origin") or REQUEST_EVIDENCE_ORIGIN,
            given=True,
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
        items.append(
            ContextItem.from_text(
                "diagnostic",
                f"check:{run['name']}",
                text,
                counter=counter,
                origin=CHECK_RUN_ORIGIN,
                given=True,
            )
        )
    return items


def _bundle_items(task_id: str, counter: TokenCounter) -> tuple[str | None, list[ContextItem]]:
    """The resolver's latest bundle: its facts and code, each with its trust class, origin
    (``source:locator``) and when it was observed, measured against the resolve's own time ("observed 2
    days ago"; a stale item says so as the resolver recorded it: "stale: observed 3 years ago (TTL 30
    days)"), minus the items a human rejected when settling a conflict. Returns the bundle's digest too
    (recorded on the compiled context). No clock is read: a replay renders the same words."""
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
            observed=observed_words(entry.observed_at, bundle.resolved_at, entry.stale_reason),
            given=True,
        )
        for entry in bundle.usable_items
        if entry.text.strip()
    ]
    return bundle.digest, items


def observed_words(observed_at: str | None, resolved_at: datetime | None, stale_reason: str | None) -> str:
    """When a retrieved item was observed, as people say it, against the time of the resolve that read it
    ("observed 2 days ago", "observed just now" under a minute), and why it is stale when it is."""
    observed = "observed at an unknown time"
    if observed_at and resolved_at is not None:
        age = (resolved_at - datetime.fromisoformat(observed_at)).total_seconds()
        observed = "observed just now" if age < JUST_NOW_SECONDS else f"observed {human_age(age)}"
    if not stale_reason:
        return observed
    if stale_reason.startswith("observed "):  # the resolver's own words already say when
        return f"stale: {stale_reason}"
    return f"{observed} · stale: {stale_reason}"


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
        compiler_version=context.compiler_version,
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


def context_diff(*, before_result: CompiledContext, after_result: CompiledContext) -> ContextDiff:
    """Which items (and tools) entered and left between two contexts, and why (C12)."""
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


def iter_excluded(result: CompiledContext, limit: int | None = None) -> Iterable[Any]:
    records = result.excluded
    return records if limit is None else records[:limit]


# --- the usage ledger (issue 28) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CardDrift:
    """One card's drift in one project over its latest reports (``NEXUM_USAGE_DRIFT_WINDOW``), and whether it
    is past ``threshold`` (``NEXUM_USAGE_DRIFT_THRESHOLD``)."""

    project_id: str
    card_word: str
    summary: DriftSummary
    threshold: float

    @property
    def drifting(self) -> bool:
        return self.summary.over(self.threshold)


def drift_per_card(*, project_id: str | None = None) -> list[CardDrift]:
    """Every card with usage reported, in one project or (``None``) every project, by project and word: the
    selector a drift gauge reads. Each card reads only its latest reports, by index."""
    window = settings.NEXUM_USAGE_DRIFT_WINDOW
    threshold = settings.NEXUM_USAGE_DRIFT_THRESHOLD
    cards = ContextUsage.objects.all()
    if project_id is not None:
        cards = cards.filter(project_id=project_id)
    pairs = cards.order_by("project_id", "card_word").values_list("project_id", "card_word").distinct()
    drifts = []
    for project, word in pairs:
        samples = list(
            ContextUsage.objects.filter(project_id=project, card_word=word)
            .order_by("-position")
            .values_list("nexum_tokens", "prompt_tokens")[:window]
        )
        summary = summarize_drift(samples)
        if summary is not None:
            drifts.append(CardDrift(str(project), word, summary, threshold))
    return drifts


def drift_by_card(*, project_id: str) -> dict[str, CardDrift]:
    """The project's cards with usage, by card word."""
    return {drift.card_word: drift for drift in drift_per_card(project_id=project_id)}


@dataclass(frozen=True)
class UsageTotals:
    """Usage summed over reports: Nexum's and the provider's prompt tokens, completion tokens and cost (the
    sum of the reports that gave one; ``None`` when none did)."""

    reports: int
    nexum_tokens: int
    prompt_tokens: int
    completion_tokens: int
    cost: Decimal | None
    costed_reports: int


@dataclass(frozen=True)
class CardUsage:
    card_word: str
    totals: UsageTotals


def _totals(rows: QuerySet[ContextUsage]) -> UsageTotals:
    sums = rows.aggregate(
        reports=Count("usage_id"),
        nexum_tokens=Sum("nexum_tokens"),
        prompt_tokens=Sum("prompt_tokens"),
        completion_tokens=Sum("completion_tokens"),
        cost_sum=Sum("cost"),
        costed_reports=Count("cost"),
    )
    return UsageTotals(
        reports=sums["reports"],
        nexum_tokens=sums["nexum_tokens"] or 0,
        prompt_tokens=sums["prompt_tokens"] or 0,
        completion_tokens=sums["completion_tokens"] or 0,
        cost=sums["cost_sum"],
        costed_reports=sums["costed_reports"],
    )


def usage_totals(
    *, project_id: str, task_id: str | None = None, goal_id: str | None = None
) -> tuple[UsageTotals, list[CardUsage]]:
    """The usage of the project, of one goal (its tasks' contexts) or of one task: the totals, and the
    totals per card. ``task_id`` and ``goal_id`` must name the project's task or goal (``NotFound``)."""
    rows = ContextUsage.objects.filter(project_id=project_id)
    if task_id is not None:
        task = Task.objects.filter(project_id=project_id, id=uuid_or_none(task_id), is_goal=False).first()
        if task is None:
            raise NotFound(f"no task {task_id}", field="task")
        rows = rows.filter(task_id=task.id)
    if goal_id is not None:
        goal = Task.objects.filter(project_id=project_id, id=uuid_or_none(goal_id), is_goal=True).first()
        if goal is None:
            raise NotFound(f"no goal {goal_id}", field="goal")
        rows = rows.filter(goal_id=goal.id)
    words = rows.order_by("card_word").values_list("card_word", flat=True).distinct()
    return _totals(rows), [CardUsage(word, _totals(rows.filter(card_word=word))) for word in words]
