"""The synchronous compile (SPEC C1, C10): compile a task's context for one model call, store it by digest
and record the compile as an event (``ContextCompiled``); a queued compile (``requests``) is answered by it
too.

A compile reads, then records (issue 15: no log-wide lock around the read):

1. inside ``reading.consistent_read`` (a REPEATABLE READ snapshot on PostgreSQL) it takes the project's head,
   the live budget for the model word (catalog and overlay as they are now: O2) and the world state as of
   that position, and runs the compiler on item metadata, loading only the included texts
   (``selectors.compile_input``); appends and other compiles go on meanwhile;
2. in a short transaction of its own, the result is stored once per digest (``StoredContext``) and
   ``ContextCompiled`` appended to the request's stream (the request id as idempotency key, the stream's
   expected version guarding against a second answer), recording the position the snapshot saw.

A compile that folds (O6: compaction on, and the task's progress notes and tool calls over the overlay's
``auto_compact_tokens``, O1–O3) writes the world it then reads: the fold (``task_compact``) and the read
must see one state, and two compiles of a task must not fold the same notes twice. Such a compile holds
the append lock from the fold to its commit, as every compile once did. Folds are rare (once per
threshold's worth of notes), so the lock is held briefly and seldom. Whether a fold will be made is decided
inside the snapshot without it (``fold_for``: a fold is due and the summarizer gives it a useful summary):
a task over the threshold whose notes cannot be summarized usefully compiles without the lock, as any other.

Embedders (issue 24). A compile of version 5 on names the embedder it ranked by (``NEXUM_EMBEDDER``,
``name@version``), records it (``ContextCompiled.embedder``, ``StoredContext.embedder``) and stores, in the
transaction that records it, the vectors it had to make for items stored without one. A replay ranks by
the recorded embedder (the items' vectors and the query's made by it again: a vector is a pure function of
text and embedder); when this process cannot load it, the replay says so rather than report a mismatch.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from django.utils import timezone

from context_app.catalog import selectors as catalog_selectors
from context_app.catalog.selectors import ModelChoice
from context_app.compilation.models import ContextCompilation, StoredContext
from context_app.compilation.selectors.compile_input import compile_input_for, item_text_loader
from context_app.compilation.selectors.contexts import context_get
from context_app.compilation.services.compile_settings import compile_embedder, relevance_floor
from context_app.compilation.services.folds import fold_for, task_compact
from context_app.compilation.services.request_inputs import (
    store_evidence,
    store_focus,
    validate_evidence,
    validate_focus,
    validate_model_word,
    validate_request_id,
)
from context_app.world.vectors import NewVector, store_vectors
from nexum.adapters import metrics, telemetry
from nexum.adapters.embedding import Embedder, embedder_id
from nexum.adapters.tokenization import counter_for
from nexum.core.catalog.budgets import ModelBudget
from nexum.core.compilation import events as compilation_events
from nexum.core.compilation.compiler import compile_context
from nexum.core.compilation.model import DEFAULT_RELEVANCE_FLOOR, CompiledContext
from nexum.core.compilation.versions import COMPILER_VERSION
from nexum.core.errors import ConcurrencyError, DomainError, NotFound, ValidationFailed
from nexum.core.ids import COMPILATION_IDS
from nexum.eventstore import locks, reading, replica, store
from tasks_app import selectors as task_selectors
from tasks_app.models import Task


class _Configured:
    """``compile_task``'s default embedder: ``NEXUM_EMBEDDER``'s, from ``compile_input.VECTORS_FROM``."""


CONFIGURED = _Configured()


@dataclass(frozen=True)
class CompileOutcome:
    """What a compile request got: the stored context and the request's record."""

    request_id: str
    context: StoredContext
    compilation: ContextCompilation
    result: CompiledContext | None = None
    """The compiler's result, when this request compiled it (not when it returns an earlier answer)."""


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
    word = validate_model_word(model_word)
    evidence = validate_evidence(extra_evidence)
    focus = validate_focus(focus)
    request_id = validate_request_id(request_id)
    done = _finished(project_id, request_id)
    if done is not None:
        return done
    return compile_and_record(
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


def compile_and_record(*, task: Task, word: str, request_id: str, **options: Any) -> CompileOutcome:
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
    read = replica.read_with_fallback(
        read_alias,
        partial(
            _read_phase,
            task=task,
            word=word,
            overrides=overrides,
            evidence=evidence,
            compaction=compaction,
            request_id=request_id,
            expected_version=expected_version,
            focus=focus,
        ),
    )
    if isinstance(read, CompileOutcome):
        return read
    choice, threshold, floor, embedder, embedded, folds, result, bundle_digest, position = read
    encoding = choice.card.encoding
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
        locks.lock_project(project_id)
        answered = _answered(project_id, request_id, expected_version)
        if answered is not None:
            return answered
        task_compact(task=task, threshold=threshold, encoding=encoding, actor=actor, embedder=embedder)
        position = reading.project_head(project_id)[0]
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


class _ReadPhase(NamedTuple):
    """What a compile read, in one snapshot of the project, before anything is written: the budget, the
    compaction threshold, the relevance floor, the embedder and the vectors it made, whether a fold is due
    and, when none is, the compiled result, its bundle digest and the log position it was read at."""

    choice: ModelChoice
    threshold: int | None
    floor: float
    embedder: Embedder | None
    embedded: list[NewVector]
    folds: bool
    result: CompiledContext | None
    bundle_digest: str | None
    position: int


def _read_phase(
    *,
    task: Task,
    word: str,
    overrides: Mapping[str, Any] | None,
    evidence: Sequence[Mapping[str, Any]],
    compaction: bool | None,
    request_id: str,
    expected_version: int,
    focus: str,
) -> _ReadPhase | CompileOutcome:
    """The compile's reads, in one consistent snapshot of the project (on the alias chosen for it), or the
    first answer when the request was answered meanwhile. Writes nothing: on a failed replica it is read
    again on the primary (``replica.read_with_fallback``)."""
    project_id = str(task.project_id)
    with reading.consistent_read(project_id) as position:
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
            and fold_for(
                task=task, threshold=threshold, encoding=encoding, embedder=embedder, embedded=embedded
            )
            is not None
        )
        result, bundle_digest = None, None
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
    return _ReadPhase(choice, threshold, floor, embedder, embedded, folds, result, bundle_digest, position)


def _answered(project_id: str, request_id: str, expected_version: int) -> CompileOutcome | None:
    """The first answer when the request was answered meanwhile (a concurrent retry or a redelivered
    message), ``None`` when it is still to be answered."""
    if reading.stream_version(compilation_events.compile_stream(request_id)) <= expected_version:
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
    evidence_digest = store_evidence(project_id, evidence)
    focus_digest = store_focus(project_id, focus)
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
    task_input = compile_input_for(
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
        load_texts=item_text_loader,
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


def _finished(project_id: str, request_id: str) -> CompileOutcome | None:
    row = ContextCompilation.objects.filter(request_id=request_id).first()
    if row is None:
        return None
    if str(row.project_id) != str(project_id):
        raise NotFound(f"no compile request {request_id}", field="request_id")
    if row.status != compilation_events.REQUEST_DONE:
        raise ValidationFailed(f"compile request {request_id} is {row.status}", field="request_id")
    return CompileOutcome(request_id, context_get(project_id=project_id, digest=row.digest), row)
