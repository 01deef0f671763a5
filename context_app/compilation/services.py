"""The compile service (SPEC C1, C8, C10, C11): compile a task's context for one model call, store it by
digest, record the compile as an event, replay it, and fold old progress into a summary.

A compile reads, then records (issue 15: no log-wide lock around the read):

1. inside ``store.consistent_read`` (a REPEATABLE READ snapshot on PostgreSQL) it takes the project's head,
   the live budget for the model word (catalog and overlay as they are now: O2) and the world state as of
   that position, and runs the compiler on item metadata, loading only the included texts (``selectors``);
   appends and other compiles go on meanwhile;
2. in a short transaction of its own, the result is stored once per digest (``StoredContext``) and
   ``ContextCompiled`` appended to the request's stream (the request id as idempotency key, the stream's
   expected version guarding against a second answer), recording the position the snapshot saw.

A compile that folds (O6: compaction on, and the task's progress notes and tool calls over the overlay's
``auto_compact_tokens``, O1–O3) writes the world it then reads: the fold (``task_compact``) and the read
must see one state, and two compiles of a task must not fold the same notes twice. Such a compile holds
the append lock from the fold to its commit, as every compile once did. Folds are rare (once per
threshold's worth of notes), so the lock is held briefly and seldom. Whether a fold will be made is decided
inside the snapshot without it (``_fold_for``: a fold is due and the summarizer gives it a useful summary):
a task over the threshold whose notes cannot be summarized usefully compiles without the lock, as any other.

Replay (C8) rebuilds the read models as of the stored position (``state_as_of``), recompiles with the budget
and evidence the compile recorded, and compares digests.

Embedders (issue 24). A compile of version 5 on names the embedder it ranked by (``NEXUM_EMBEDDER``,
``name@version``), records it (``ContextCompiled.embedder``, ``StoredContext.embedder``) and stores, in the
transaction that records it, the vectors it had to make for items stored without one. A replay ranks by
the recorded embedder (the items' vectors and the query's made by it again: a vector is a pure function of
text and embedder); when this process cannot load it, the replay says so rather than report a mismatch.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, overload

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from context_app.catalog import selectors as catalog_selectors
from context_app.compilation import selectors
from context_app.compilation.candidates import CANDIDATES
from context_app.compilation.models import CompileEvidence, ContextCompilation, ContextUsage, StoredContext
from context_app.world.embedder import configured_embedder, embedder_setting
from context_app.world.models import WorldItem
from context_app.world.services import Scope, progress_record
from context_app.world.vectors import NewVector, store_vectors
from nexum.adapters import metrics, telemetry
from nexum.adapters.embedding import DEFAULT_EMBEDDER, Embedder, embedder_id, embedder_named
from nexum.adapters.tokenization import counter_for
from nexum.core.catalog import usage
from nexum.core.catalog.budgets import ModelBudget
from nexum.core.compilation import events as compilation_events
from nexum.core.compilation import rules as compilation_rules
from nexum.core.compilation.compiler import compile_context
from nexum.core.compilation.model import DEFAULT_RELEVANCE_FLOOR, EVIDENCE_KINDS, CompiledContext, ContextItem
from nexum.core.compilation.versions import COMPILER_VERSION
from nexum.core.digests import digest_of
from nexum.core.errors import (
    ConcurrencyError,
    Conflict,
    DomainError,
    NotFound,
    PolicyRefused,
    ValidationFailed,
)
from nexum.core.ids import COMPILATION_IDS
from nexum.core.text import require_storable
from nexum.core.trust import TrustClass
from nexum.core.world.items import DEFAULT_TRUST_CLASS, RECORDABLE_TRUST_CLASSES, SHORT_MAX, TEXT_MAX
from nexum.eventstore import projections, replica, store
from tasks_app import selectors as task_selectors
from tasks_app.models import Project, Task

DEFAULT_SUMMARIZER = "nexum.core.compilation.rules.extractive_summary"
EVIDENCE_MAX_ITEMS = 200
EVIDENCE_ID_MAX = 200
SUMMARY_MAX_TOKENS = 4000


class _Configured:
    """``compile_task``'s default embedder: ``NEXUM_EMBEDDER``'s, from ``selectors.VECTORS_FROM``."""


CONFIGURED = _Configured()


@dataclass(frozen=True)
class CompileOutcome:
    """What a compile request got: the stored context and the request's record."""

    request_id: str
    context: StoredContext
    compilation: ContextCompilation
    result: CompiledContext | None = None
    """The compiler's result, when this request compiled it (not when it returns an earlier answer)."""


@dataclass(frozen=True)
class ReplayOutcome:
    digest: str
    replayed_digest: str
    matches: bool
    position: int


# --- compile ----------------------------------------------------------------------------------------------


def context_compile(
    *,
    project_id: str,
    task_id: str,
    model_word: str,
    overrides: Mapping[str, Any] | None = None,
    extra_evidence: Sequence[Mapping[str, Any]] = (),
    compaction: bool | None = None,
    request_id: str | None = None,
    focus: str = "",
    actor: str,
    min_position: int = 0,
) -> CompileOutcome:
    """Compile the context of ``task_id`` for a call under ``model_word`` now (synchronously).

    ``overrides`` (``context_tokens``, ``tool_count``) outrank the card (B3); ``extra_evidence`` is a list
    of ``{"kind": "diagnostic"|"code", "id", "text", "origin"?, "trust_class"?}``; ``compaction`` is the
    request's own choice (O6); ``focus`` says what the agent is working on now (part of the query, shown in
    the current step, recorded for replay). The same ``request_id`` again returns the first answer and
    writes nothing. Another project's task is ``NotFound``; bad input is ``ValidationFailed`` naming the
    field; in both cases nothing is written. With a read replica configured, the world is read from it
    once it has replayed the project up to ``min_position`` (the caller's last write), else from the
    primary (``nexum.eventstore.replica``); the compile is recorded on the primary.
    """
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    word = _model_word(model_word)
    evidence = check_evidence(extra_evidence)
    focus = check_focus(focus)
    request_id = _request_id(request_id)
    done = _finished(project_id, request_id)
    if done is not None:
        return done
    return _compile_and_record(
        task=task,
        word=word,
        overrides=overrides,
        evidence=evidence,
        compaction=compaction,
        request_id=request_id,
        expected_version=0,
        focus=focus,
        actor=actor,
        read_alias=replica.read_alias(project_id, min_position),
    )


def context_compile_request(
    *,
    project_id: str,
    task_id: str,
    model_word: str,
    overrides: Mapping[str, Any] | None = None,
    extra_evidence: Sequence[Mapping[str, Any]] = (),
    compaction: bool | None = None,
    request_id: str | None = None,
    focus: str = "",
    actor: str,
) -> ContextCompilation:
    """Queue a compile for a worker (C10): checks the request now (the model word, overrides, evidence),
    records ``ContextCompileRequested`` and sends it to a worker when the transaction commits (a broker that
    is down leaves it queued for the dispatcher, ``nexum.work.dispatch``). A repeated ``request_id`` returns
    the original request and writes nothing."""
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    word = _model_word(model_word)
    evidence = check_evidence(extra_evidence)
    focus = check_focus(focus)
    request_id = _request_id(request_id)
    if compaction is not None and not isinstance(compaction, bool):
        raise ValidationFailed("compaction must be true, false or absent", field="compaction")
    existing = ContextCompilation.objects.filter(request_id=request_id).first()
    if existing is not None:
        if str(existing.project_id) != str(project_id):
            raise NotFound(f"no compile request {request_id}", field="request_id")
        return existing
    # The word and overrides are checked now, so a bad request is refused and not a failed job.
    catalog_selectors.requested_budget_for(
        project_id=project_id, word=word, field="model", overrides=overrides
    )
    from context_app.compilation.tasks import COMPILE
    from nexum.work.dispatch import send_on_commit

    with transaction.atomic():
        evidence_digest = _store_evidence(project_id, evidence)
        focus_digest = _store_focus(project_id, focus)
        store.append(
            stream_id=compilation_events.compile_stream(request_id),
            events=[
                compilation_events.ContextCompileRequested(
                    request_id=request_id,
                    task_id=str(task.id),
                    goal_id=str(task.goal_id),
                    model_word=word,
                    overrides={
                        key: value for key, value in sorted((overrides or {}).items()) if value is not None
                    },
                    compaction=compaction,
                    evidence_digest=evidence_digest,
                    focus_digest=focus_digest,
                )
            ],
            expected_version=0,
            idempotency_key=f"requested-{request_id}",
            actor=actor,
            project_id=str(project_id),
        )
    send_on_commit(COMPILE, request_id)
    return ContextCompilation.objects.get(request_id=request_id)


def context_compile_run(*, request_id: str, actor: str = "worker") -> ContextCompilation | None:
    """Answer a queued request (the worker's side). Idempotent: a request already answered (a redelivered
    message) writes nothing; a refused compile records ``ContextCompileFailed``."""
    queued = ContextCompilation.objects.filter(request_id=request_id).first()
    if queued is None:
        return None
    if queued.status != compilation_events.REQUEST_QUEUED:
        return queued
    project_id = str(queued.project_id)
    try:
        task = Task.objects.get(id=queued.task_id, project_id=queued.project_id)
        evidence = (
            selectors.evidence_get(project_id=project_id, digest=queued.evidence_digest)
            if queued.evidence_digest
            else []
        )
        _compile_and_record(
            task=task,
            word=queued.model_word,
            overrides=queued.overrides or None,
            evidence=evidence,
            compaction=queued.compaction,
            request_id=str(queued.request_id),
            expected_version=queued.version,
            focus=_focus_text(project_id, queued.focus_digest),
            actor=actor,
        )
    except ConcurrencyError:
        pass  # another delivery of the same message answered it first
    except DomainError as error:
        with contextlib.suppress(ConcurrencyError):  # answered by another delivery meanwhile
            store.append(
                stream_id=compilation_events.compile_stream(str(queued.request_id)),
                events=[
                    compilation_events.ContextCompileFailed(
                        request_id=str(queued.request_id),
                        task_id=str(queued.task_id),
                        code=error.code,
                        message=error.message,
                        field=error.field,
                    )
                ],
                expected_version=queued.version,
                actor=actor,
                project_id=project_id,
            )
    return ContextCompilation.objects.get(request_id=request_id)


def _compile_and_record(*, task: Task, word: str, request_id: str, **options: Any) -> CompileOutcome:
    """``_compile_and_record_unmeasured`` in a ``nexum.compile`` span that says what was compiled, for whom,
    and what came of it; a compile this request made, not an earlier answer returned again, counts its
    latency and tokens by model word (``nexum.adapters.metrics``)."""
    started = time.perf_counter()
    with telemetry.span(
        "nexum.compile",
        project_id=str(task.project_id),
        task_id=str(task.id),
        model_word=word,
        compile_id=request_id,
    ) as traced:
        try:
            outcome = _compile_and_record_unmeasured(task=task, word=word, request_id=request_id, **options)
        except DomainError as error:
            traced.set(outcome=error.code)
            raise
        context = outcome.context
        traced.set(
            outcome="compiled" if outcome.result is not None else "answered_before",
            budget_tokens=context.budget.get("context_tokens"),
            tokens_used=context.prompt_tokens + context.tool_tokens,
            excluded_count=context.excluded_count,
            digest=context.digest,
        )
    if outcome.result is not None:
        metrics.compile_recorded(
            model_word=word, seconds=time.perf_counter() - started, tokens=outcome.result.total_tokens
        )
    return outcome


def _compile_and_record_unmeasured(
    *,
    task: Task,
    word: str,
    overrides: Mapping[str, Any] | None,
    evidence: Sequence[Mapping[str, Any]],
    compaction: bool | None,
    request_id: str,
    expected_version: int,
    focus: str,
    actor: str,
    read_alias: str = replica.PRIMARY,
) -> CompileOutcome:
    project_id = str(task.project_id)
    with replica.reading_from(read_alias), store.consistent_read(project_id) as position:
        answered = _answered(project_id, request_id, expected_version)
        if answered is not None:
            return answered
        choice = catalog_selectors.requested_budget_for(
            project_id=project_id, word=word, field="model", overrides=overrides, compaction=compaction
        )
        encoding = choice.card.encoding
        threshold = choice.auto_compact_tokens if choice.compaction_enabled else None
        floor = relevance_floor(project_id)
        embedder = compile_embedder(COMPILER_VERSION)
        embedded: list[NewVector] = []
        folds = (
            bool(threshold)
            and _fold_for(
                task=task, threshold=threshold, encoding=encoding, embedder=embedder, embedded=embedded
            )
            is not None
        )
        if not folds:
            result, bundle_digest = compile_task(
                task=task,
                budget=choice.budget,
                encoding=encoding,
                evidence=evidence,
                compaction_threshold=threshold or None,
                focus=focus,
                relevance_floor=floor,
                embedder=embedder,
                embedded=embedded,
            )
    record = partial(
        _record,
        task=task,
        word=word,
        evidence=evidence,
        request_id=request_id,
        expected_version=expected_version,
        compaction_threshold=threshold or None,
        focus=focus,
        relevance_floor=floor,
        embedder=embedder_id(embedder),
        embedded=embedded,
    )
    if not folds:
        try:
            with transaction.atomic():
                return record(result=result, bundle_digest=bundle_digest, position=position, actor=actor)
        except (ConcurrencyError, store.IdempotencyKeyReused):
            # Answered meanwhile by a concurrent retry or a redelivered message: the first answer stands.
            answered = _finished(project_id, request_id)
            if answered is None:
                raise
            return answered
    with transaction.atomic():
        # The fold and the read see one state: no event lands between them (see the module docstring).
        store.lock_project(project_id)
        answered = _answered(project_id, request_id, expected_version)
        if answered is not None:
            return answered
        task_compact(task=task, threshold=threshold, encoding=encoding, actor=actor, embedder=embedder)
        position = store.project_head(project_id)[0]
        result, bundle_digest = compile_task(
            task=task,
            budget=choice.budget,
            encoding=encoding,
            evidence=evidence,
            compaction_threshold=threshold,
            focus=focus,
            relevance_floor=floor,
            embedder=embedder,
            embedded=embedded,
        )
        return record(result=result, bundle_digest=bundle_digest, position=position, actor=actor)


def _answered(project_id: str, request_id: str, expected_version: int) -> CompileOutcome | None:
    """The first answer when the request was answered meanwhile (a concurrent retry or a redelivered
    message), ``None`` when it is still to be answered."""
    if store.stream_version(compilation_events.compile_stream(request_id)) <= expected_version:
        return None
    answered = _finished(project_id, request_id)
    if answered is None:
        raise ConcurrencyError(f"compile request {request_id} was answered meanwhile", field="request_id")
    return answered


def _record(**arguments: Any) -> CompileOutcome:
    """``_record_in_transaction`` (the caller's transaction) as the compile's ``record`` phase."""
    with telemetry.phase_span("record"):
        return _record_in_transaction(**arguments)


def _record_in_transaction(
    *,
    task: Task,
    word: str,
    evidence: Sequence[Mapping[str, Any]],
    request_id: str,
    expected_version: int,
    result: CompiledContext,
    bundle_digest: str | None,
    position: int,
    actor: str,
    compaction_threshold: int | None,
    focus: str,
    relevance_floor: float,
    embedder: str,
    embedded: Sequence[NewVector],
) -> CompileOutcome:
    """Store the compiled context by digest, the vectors the compile made, and append ``ContextCompiled``."""
    project_id = str(task.project_id)
    store_vectors(embedded)
    evidence_digest = _store_evidence(project_id, evidence)
    focus_digest = _store_focus(project_id, focus)
    context = _store_context(
        task=task,
        result=result,
        request_id=request_id,
        model_word=word,
        position=position,
        bundle_digest=bundle_digest,
        evidence_digest=evidence_digest,
        embedder=embedder,
    )
    store.append(
        stream_id=compilation_events.compile_stream(request_id),
        events=[
            compilation_events.ContextCompiled(
                request_id=request_id,
                task_id=str(task.id),
                goal_id=str(task.goal_id),
                digest=result.digest,
                model_word=word,
                position=position,
                budget=result.budget.as_data(),
                encoding=result.encoding,
                bundle_digest=bundle_digest,
                evidence_digest=evidence_digest,
                prompt_tokens=result.prompt_tokens,
                tool_tokens=result.tool_tokens,
                included_count=len(result.included),
                excluded_count=context.excluded_count,
                compaction_threshold=compaction_threshold,
                focus_digest=focus_digest,
                relevance_floor=relevance_floor,
                embedder=embedder,
            )
        ],
        expected_version=expected_version,
        idempotency_key=request_id,
        actor=actor,
        project_id=project_id,
    )
    answer = ContextCompilation.objects.get(request_id=request_id)
    return CompileOutcome(request_id, context, answer, result if answer.digest == result.digest else None)


def compile_task(
    *,
    task: Task,
    budget: ModelBudget,
    encoding: str,
    evidence: Sequence[Mapping[str, Any]] = (),
    version: int | None = None,
    compaction_threshold: int | None = None,
    focus: str = "",
    relevance_floor: float = DEFAULT_RELEVANCE_FLOOR,
    embedder: Embedder | _Configured | None = CONFIGURED,
    embedded: list[NewVector] | None = None,
) -> tuple[CompiledContext, str | None]:
    """Compile ``task`` with ``budget`` against the read models as they are (no writes), rendered by the
    compiler's ``version`` (an older one to replay a context stored by it; by default the current one),
    ranked by ``embedder`` (by default the configured one; from version 5). The task's folds that
    ``compaction_threshold`` needs show their summaries; the others show their entries when those fit
    (C11: a fold is per model budget). Vectors made for items that had none go to ``embedded``."""
    counter = counter_for(encoding)
    version = COMPILER_VERSION if version is None else version
    if isinstance(embedder, _Configured):
        embedder = compile_embedder(version)
    task_input = selectors.compile_input_for(
        task=task,
        encoding=encoding,
        counter=counter,
        extra_evidence=evidence,
        compaction_threshold=compaction_threshold,
        version=version,
        focus=focus,
        relevance_floor=relevance_floor,
        embedder=embedder,
    )
    if embedded is not None:
        embedded.extend(task_input.embedded)
    result = compile_context(
        task_input.compile_input,
        budget=budget,
        counter=counter,
        load_texts=selectors.item_text_loader,
        version=version,
        sections=task_input.sections,
        phase=telemetry.phase_span,
    )
    return result, task_input.bundle_digest


def _store_context(
    *,
    task: Task,
    result: CompiledContext,
    request_id: str,
    model_word: str,
    position: int,
    bundle_digest: str | None,
    evidence_digest: str | None,
    embedder: str,
) -> StoredContext:
    project_id = str(task.project_id)
    # Same digest, same canonical form: the stored row's large texts are what this compile holds already.
    existing = (
        StoredContext.objects.filter(project_id=project_id, digest=result.digest)
        .defer("prompt_block", "exclusion_runs")
        .first()
    )
    if existing is not None:
        existing.prompt_block = result.prompt_block
        existing.exclusion_runs = result.exclusion_runs_json
        return existing
    canonical = result.canonical_form()
    context = StoredContext(
        id=uuid.uuid5(COMPILATION_IDS, f"{project_id}/context/{result.digest}"),
        project_id=project_id,
        digest=result.digest,
        task_id=task.id,
        goal_id=task.goal_id,
        request_id=request_id,
        model_word=model_word,
        encoding=result.encoding,
        position=position,
        budget=canonical["budget"],
        bundle_digest=bundle_digest or "",
        evidence_digest=evidence_digest or "",
        prompt_block=result.prompt_block,
        tools=canonical["tools"],
        included=canonical["included"],
        exclusion_runs=result.exclusion_runs_json,
        excluded_count=sum(len(run.ids) for run in result.exclusion_runs),
        truncated=canonical["truncated"],
        section_tokens=canonical["section_tokens"],
        prompt_tokens=result.prompt_tokens,
        tool_tokens=result.tool_tokens,
        compiler_version=canonical["compiler_version"],
        embedder=embedder,
        stored_at=timezone.now(),
    )
    try:
        with transaction.atomic():
            context.save(force_insert=True)
    except IntegrityError:  # stored meanwhile by a compile outside the log lock (a replay never stores)
        return StoredContext.objects.get(project_id=project_id, digest=result.digest)
    return context


# --- replay (C8) ------------------------------------------------------------------------------------------


def context_replay(*, project_id: str, digest: str) -> ReplayOutcome:
    """Recompile a stored context's task as of the log position it was compiled at, with the budget, request
    evidence and compiler version it recorded, and compare digests. Writes nothing. A context retention
    pruned replays the same way: the log and the evidence it needs are kept."""
    context = selectors.context_get(project_id=project_id, digest=digest)
    result = _recompile(context)
    return ReplayOutcome(
        digest=context.digest,
        replayed_digest=result.digest,
        matches=result.digest == context.digest,
        position=context.position,
    )


def context_content(context: StoredContext) -> CompiledContext:
    """A stored context's content: as stored, or, for one retention pruned, recompiled at its position and
    verified against its digest (``context_not_reproducible`` when it does not match: nothing is shown that
    is not the context the digest names)."""
    if context.pruned_at is None:
        return selectors.compiled_result(context)
    result = _recompile(context)
    if result.digest != context.digest:
        raise Conflict(
            f"compiled context {context.digest} was pruned by retention and its recompile at position "
            f"{context.position} gives {result.digest}: the content cannot be shown",
            field="digest",
            code="context_not_reproducible",
            details={"digest": context.digest, "replayed_digest": result.digest},
        )
    return result


def _recompile(context: StoredContext) -> CompiledContext:
    """The compiler's result for ``context``'s task as of its position, with what its compile recorded."""
    project_id = str(context.project_id)
    evidence = (
        selectors.evidence_get(project_id=project_id, digest=context.evidence_digest)
        if context.evidence_digest
        else []
    )
    budget = ModelBudget(**context.budget)
    compiled = _recorded_compile(context)
    threshold = None if compiled is None else compiled.compaction_threshold
    embedder = recorded_embedder(context.embedder or (compiled.embedder if compiled is not None else None))
    with projections.state_as_of(context.position, project_id=project_id):
        task = Task.objects.get(id=context.task_id)
        result, _ = compile_task(
            task=task,
            budget=budget,
            encoding=context.encoding,
            evidence=evidence,
            version=context.compiler_version,
            compaction_threshold=threshold,
            focus="" if compiled is None else _focus_text(project_id, compiled.focus_digest),
            relevance_floor=DEFAULT_RELEVANCE_FLOOR
            if compiled is None or compiled.relevance_floor is None
            else compiled.relevance_floor,
            embedder=embedder,
        )
    return result


def _recorded_compile(context: StoredContext) -> compilation_events.ContextCompiled | None:
    """The ``ContextCompiled`` of the compile that stored ``context``: the compaction threshold it honoured,
    its focus and its relevance floor."""
    for stored in store.read_stream(compilation_events.compile_stream(str(context.request_id))):
        if isinstance(stored.event, compilation_events.ContextCompiled):
            return stored.event
    return None


def compile_embedder(version: int) -> Embedder | None:
    """The embedder a compile of ``version`` ranks by: the configured one from ``VECTORS_FROM``."""
    return configured_embedder() if version >= selectors.VECTORS_FROM else None


def recorded_embedder(recorded: str | None) -> Embedder | None:
    """The embedder a stored context was compiled with (``name@version``; empty or ``None``: none, as for
    every context compiled before embedders), loaded: the configured one or the default when either is
    it; otherwise refused (``embedder_unavailable``) naming both, since its vectors cannot be remade here."""
    if not recorded:
        return None
    candidates = [embedder_setting(), DEFAULT_EMBEDDER]
    for spec in dict.fromkeys(candidates):
        with contextlib.suppress(DomainError):
            embedder = embedder_named(spec)
            if embedder is not None and embedder_id(embedder) == recorded:
                return embedder
    raise PolicyRefused(
        f"this context was compiled with the embedder {recorded}, which this process cannot load "
        f"(NEXUM_EMBEDDER is {embedder_setting()!r}): set NEXUM_EMBEDDER to that embedder to replay it",
        field="embedder",
        code="embedder_unavailable",
        details={"embedder": recorded},
    )


def relevance_floor(project_id: str | None = None) -> float:
    """The relevance floor compiles of the project apply: its own when set
    (``PUT /api/v1/project/compile-settings``),
    else ``NEXUM_RELEVANCE_FLOOR``, checked: a number from 0 to 1."""
    if project_id is not None:
        own = Project.objects.filter(id=project_id).values_list("relevance_floor", flat=True).first()
        if own is not None:
            return float(own)
    floor = getattr(settings, "NEXUM_RELEVANCE_FLOOR", DEFAULT_RELEVANCE_FLOOR)
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0.0 <= floor <= 1.0:
        raise ValidationFailed("NEXUM_RELEVANCE_FLOOR must be a number from 0 to 1", field="relevance_floor")
    return float(floor)


# --- compaction (C11) -------------------------------------------------------------------------------------


def summarizer_path() -> str:
    return str(getattr(settings, "NEXUM_COMPACTION_SUMMARIZER", DEFAULT_SUMMARIZER))


def task_compact(
    *, task: Task, threshold: int, encoding: str, actor: str, embedder: Embedder | None = None
) -> WorldItem | None:
    """Fold the oldest progress notes and tool calls of ``task`` into one summary when together they exceed
    ``threshold`` tokens (in ``encoding``). Returns the summary item, or ``None`` when nothing was folded.
    ``embedder``: the one the compile that folds ranks by (its candidates are read once, with its vectors).

    The summary is a progress note of the task (trust: the lowest of the folded items'); the fold is a
    ``ContextCompacted`` event listing the folded ids. The folded items stay in the log and the world state.
    """
    fold = _fold_for(task=task, threshold=threshold, encoding=encoding, embedder=embedder)
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
            expected_version=store.stream_version(stream),
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


def _fold_for(
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
    own = candidates.compacted_items()
    planned = _fold_plan(own, threshold)
    if not planned:
        return None
    path = summarizer_path()
    tried = (str(task.id), candidates.marks, threshold, encoding, path)
    if tried in _UNSUMMARIZABLE:
        return None
    total = sum(item.token_count for item in own)
    folded, summary = _summarized(planned, total, threshold, import_string(path), counter)
    if not folded:
        _UNSUMMARIZABLE.add(tried)
        return None
    # The summary is as trusted as the least trusted entry it folds (an agent's notes stay agent_reported).
    trust = {item.id: item.trust_class for item in own}
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


def _fold_plan(own: Sequence[ContextItem], threshold: int) -> list[compilation_rules.FoldCandidate]:
    """What a fold of the task's own items ``own`` at ``threshold`` would fold (empty: nothing is due)."""
    candidates = [
        compilation_rules.FoldCandidate(
            item.id, "tool_call" if item.kind == "diagnostic" else item.kind, item.token_count, item.position
        )
        for item in own
    ]
    return compilation_rules.plan_fold(candidates, threshold=threshold)


# --- helpers ----------------------------------------------------------------------------------------------


def check_evidence(evidence: Any) -> list[dict[str, Any]]:
    """Evidence a request supplies, checked and normalized (sorted keys; ids unique)."""
    if evidence is None:
        return []
    if not isinstance(evidence, list | tuple):
        raise ValidationFailed("evidence must be a list", field="evidence")
    if len(evidence) > EVIDENCE_MAX_ITEMS:
        raise ValidationFailed(f"at most {EVIDENCE_MAX_ITEMS} evidence items", field="evidence")
    checked: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, entry in enumerate(evidence):
        where = f"evidence.{index}"
        if not isinstance(entry, Mapping):
            raise ValidationFailed("an evidence item is an object", field=where)
        unknown = sorted(set(entry) - {"kind", "id", "text", "origin", "trust_class"})
        if unknown:
            raise ValidationFailed(f"unknown member {unknown[0]!r}", field=f"{where}.{unknown[0]}")
        kind = entry.get("kind", "code")
        if kind not in EVIDENCE_KINDS:
            raise ValidationFailed(f"kind must be one of {', '.join(EVIDENCE_KINDS)}", field=f"{where}.kind")
        text = _clean_text(entry.get("text"), f"{where}.text", TEXT_MAX, required=True)
        item_id = entry.get("id", str(index + 1))
        item_id = _clean_text(item_id, f"{where}.id", EVIDENCE_ID_MAX, required=True)
        if item_id in seen:
            raise ValidationFailed(f"evidence id {item_id!r} is given twice", field=f"{where}.id")
        seen.add(item_id)
        origin = _clean_text(entry.get("origin", ""), f"{where}.origin", SHORT_MAX, required=False)
        trust_class = entry.get("trust_class", DEFAULT_TRUST_CLASS)
        if trust_class not in RECORDABLE_TRUST_CLASSES:
            raise ValidationFailed(
                f"trust_class must be one of {', '.join(RECORDABLE_TRUST_CLASSES)}",
                field=f"{where}.trust_class",
            )
        checked.append(
            {"id": item_id, "kind": kind, "origin": origin, "text": text, "trust_class": trust_class}
        )
    return checked


FOCUS_MAX_CHARS = 2000


def check_focus(focus: Any) -> str:
    """The request's ``focus``: text of at most ``FOCUS_MAX_CHARS`` characters (absent or ``None``: none)."""
    if focus is None:
        return ""
    return _clean_text(focus, "focus", FOCUS_MAX_CHARS, required=False).strip()


def _clean_text(value: Any, field: str, limit: int, *, required: bool) -> str:
    if not isinstance(value, str):
        raise ValidationFailed(f"{field} must be a string", field=field)
    require_storable(value, field)
    if required and not value.strip():
        raise ValidationFailed(f"{field} must not be empty", field=field)
    if len(value) > limit:
        raise ValidationFailed(f"{field} is over {limit} characters", field=field)
    return value


def _model_word(word: Any) -> str:
    if not isinstance(word, str) or not word.strip() or len(word) > 100:
        raise ValidationFailed("model must be a catalog word of 1–100 characters", field="model")
    return word


def _request_id(request_id: str | None) -> str:
    if request_id is None:
        return str(uuid.uuid4())
    try:
        return str(uuid.UUID(str(request_id)))
    except ValueError:
        raise ValidationFailed("request_id must be a UUID", field="request_id") from None


def request_id_for_key(project_id: str, key: str) -> str:
    """The request id an ``Idempotency-Key`` stands for in a project (a retried request finds its answer)."""
    return str(uuid.uuid5(COMPILATION_IDS, f"{project_id}/compile/{key}"))


def _finished(project_id: str, request_id: str) -> CompileOutcome | None:
    row = ContextCompilation.objects.filter(request_id=request_id).first()
    if row is None:
        return None
    if str(row.project_id) != str(project_id):
        raise NotFound(f"no compile request {request_id}", field="request_id")
    if row.status != compilation_events.REQUEST_DONE:
        raise ValidationFailed(f"compile request {request_id} is {row.status}", field="request_id")
    return CompileOutcome(request_id, selectors.context_get(project_id=project_id, digest=row.digest), row)


def _store_evidence(project_id: str, evidence: Sequence[Mapping[str, Any]]) -> str | None:
    if not evidence:
        return None
    return _store_items(project_id, [dict(sorted(entry.items())) for entry in evidence])


def _store_focus(project_id: str, focus: str) -> str | None:
    """Keep a request's focus as the request evidence is kept (content-addressed): events carry no text."""
    return _store_items(project_id, [{"focus": focus}]) if focus else None


def _focus_text(project_id: str, digest: str | None) -> str:
    """The focus kept under ``digest`` (``_store_focus``); ``""`` for none."""
    return selectors.evidence_get(project_id=project_id, digest=digest)[0]["focus"] if digest else ""


def _store_items(project_id: str, items: list[dict[str, Any]]) -> str:
    digest = digest_of(items)
    CompileEvidence.objects.bulk_create(
        [
            CompileEvidence(
                id=uuid.uuid5(COMPILATION_IDS, f"{project_id}/evidence/{digest}"),
                project_id=project_id,
                digest=digest,
                items=items,
                stored_at=timezone.now(),
            )
        ],
        ignore_conflicts=True,
    )
    return digest


# --- the usage ledger (issue 28) ----------------------------------------------------------------------------


def context_usage_report(
    *,
    project_id: str,
    digest: str,
    prompt_tokens: object,
    completion_tokens: object,
    provider: object,
    model: object,
    cost: object = None,
    actor: str,
    idempotency_key: str | None = None,
) -> ContextUsage:
    """Record what the provider reported for one model call made with the project's context ``digest``
    (``ContextUsageReported``: the numbers, ids and digest only). An unknown or other project's digest is
    ``NotFound``; a count below 0, a blank name, a negative cost are ``ValidationFailed`` naming the member;
    nothing is written then. A retry with the same ``idempotency_key`` writes nothing and returns the first
    report."""
    values = {
        "prompt_tokens": usage.check_token_count(prompt_tokens, "prompt_tokens"),
        "completion_tokens": usage.check_token_count(completion_tokens, "completion_tokens"),
        "provider": usage.check_name(provider, "provider"),
        "model": usage.check_name(model, "model"),
        "cost": usage.check_cost(cost),
    }
    context = selectors.context_get(project_id=project_id, digest=digest)
    usage_id = (
        str(uuid.uuid4())
        if idempotency_key is None
        else str(uuid.uuid5(COMPILATION_IDS, f"{project_id}/usage/{context.digest}/{idempotency_key}"))
    )
    event = usage.ContextUsageReported(
        usage_id=usage_id,
        digest=context.digest,
        task_id=str(context.task_id),
        goal_id=str(context.goal_id),
        model_word=context.model_word,
        card_word=_card_word(project_id, context.model_word),
        nexum_tokens=context.total_tokens,
        **values,
    )
    store.append(
        stream_id=usage.usage_stream(usage_id),
        events=[event],
        expected_version=0,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=project_id,
    )
    return ContextUsage.objects.get(usage_id=usage_id)


def _card_word(project_id: str, word: str) -> str:
    """The card ``word`` resolves to in the catalog now; the word itself when the catalog has dropped it."""
    try:
        return catalog_selectors.catalog_for(project_id).resolve(word).word
    except ValidationFailed:
        return word
