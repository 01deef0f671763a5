"""Reads of what compiles stored: contexts by digest (and the core's view of one), compile requests, the
evidence a request supplied, a task's compile history and folds, the diff of two contexts (C12) and the
admin's section bars.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.db.models import QuerySet

from context_app.compilation.models import CompactionFold, CompileEvidence, ContextCompilation, StoredContext
from nexum.core.catalog.budgets import ModelBudget
from nexum.core.compilation.exclusions import ExclusionRun
from nexum.core.compilation.model import CompiledContext, SectionTokens, Truncation
from nexum.core.compilation.rules import ContextDiff, diff_contexts
from nexum.core.errors import NotFound
from nexum.core.ids import uuid_or_none


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
