"""Replay (C8) rebuilds the read models as of the stored position (``state_as_of``), recompiles with the
budget and evidence the compile recorded, and compares digests; a context retention pruned shows its content
the same way, verified against its digest.
"""

from __future__ import annotations

from dataclasses import dataclass

from context_app.compilation.models import StoredContext
from context_app.compilation.selectors.contexts import compiled_result, context_get, evidence_get
from context_app.compilation.services.compile_settings import recorded_embedder
from context_app.compilation.services.compiles import compile_task
from context_app.compilation.services.request_inputs import focus_text
from nexum.core.catalog.budgets import ModelBudget
from nexum.core.compilation import events as compilation_events
from nexum.core.compilation.model import DEFAULT_RELEVANCE_FLOOR, CompiledContext
from nexum.core.errors import Conflict
from nexum.eventstore import projections, reading
from tasks_app.models import Task


@dataclass(frozen=True)
class ReplayOutcome:
    digest: str
    replayed_digest: str
    matches: bool
    position: int


def context_replay(*, project_id: str, digest: str) -> ReplayOutcome:
    """Recompile a stored context's task as of the log position it was compiled at, with the budget, request
    evidence and compiler version it recorded, and compare digests. Writes nothing. A context retention
    pruned replays the same way: the log and the evidence it needs are kept."""
    context = context_get(project_id=project_id, digest=digest)
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
        return compiled_result(context)
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
        evidence_get(project_id=project_id, digest=context.evidence_digest) if context.evidence_digest else []
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
            focus="" if compiled is None else focus_text(project_id, compiled.focus_digest),
            relevance_floor=DEFAULT_RELEVANCE_FLOOR
            if compiled is None or compiled.relevance_floor is None
            else compiled.relevance_floor,
            embedder=embedder,
        )
    return result


def _recorded_compile(context: StoredContext) -> compilation_events.ContextCompiled | None:
    """The ``ContextCompiled`` of the compile that stored ``context``: the compaction threshold it honoured,
    its focus and its relevance floor."""
    for stored in reading.read_stream(compilation_events.compile_stream(str(context.request_id))):
        if isinstance(stored.event, compilation_events.ContextCompiled):
            return stored.event
    return None
