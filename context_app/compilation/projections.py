"""Compile history and compaction folds from the log (``ContextCompileRequested``, ``ContextCompiled``,
``ContextCompileFailed``, ``ContextCompacted``), and the usage ledger (``ContextUsageReported``). The compiled
contexts themselves are content-addressed storage written by the service, not read models: a rebuild never
clears them."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from context_app.compilation.models import (
    CompactionFold,
    ContextCompilation,
    ContextUsage,
    FoldedItem,
    PrunedContent,
)
from nexum.core.catalog.usage import ContextUsageReported, drift
from nexum.core.compilation import events as compilation_events
from nexum.core.compilation import retention
from nexum.core.compilation.events import (
    ContextCompacted,
    ContextCompiled,
    ContextCompileFailed,
    ContextCompileRequested,
)
from nexum.core.compilation.retention import BundlePruned, CheckOutputPruned, ContextPruned
from nexum.core.ids import PRUNE_IDS, as_uuid
from nexum.eventstore.projections import Projection, ReadModelRows, handles
from nexum.eventstore.reading import StoredEvent


class CompilationProjection(Projection):
    models = (ContextCompilation, CompactionFold, FoldedItem)

    @handles(ContextCompileRequested)
    def requested(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: compilation_events.ContextCompileRequested = stored.event  # type: ignore[assignment]
        rows.insert(
            ContextCompilation,
            **_new_row(stored, event.request_id, event.task_id, event.goal_id, event.model_word),
            status=compilation_events.REQUEST_QUEUED,
            overrides=dict(sorted(event.overrides.items())),
            compaction=event.compaction,
            evidence_digest=event.evidence_digest or "",
            focus_digest=event.focus_digest or "",
        )

    @handles(ContextCompiled)
    def compiled(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: compilation_events.ContextCompiled = stored.event  # type: ignore[assignment]
        request_id = as_uuid(event.request_id)
        fields: dict[str, Any] = {
            "status": compilation_events.REQUEST_DONE,
            "digest": event.digest,
            "position": event.position,
            "compiled_position": stored.position,
            "budget": dict(sorted(event.budget.items())),
            "encoding": event.encoding,
            "bundle_digest": event.bundle_digest or "",
            "evidence_digest": event.evidence_digest or "",
            "embedder": event.embedder or "",
            "prompt_tokens": event.prompt_tokens,
            "tool_tokens": event.tool_tokens,
            "included_count": event.included_count,
            "excluded_count": event.excluded_count,
            "finished_at": stored.recorded_at,
            "version": stored.version,
        }
        if rows.get(ContextCompilation, request_id) is None:
            row = _new_row(stored, event.request_id, event.task_id, event.goal_id, event.model_word)
            rows.insert(ContextCompilation, **{**row, **fields})
        else:
            rows.update(ContextCompilation, request_id, **fields)

    @handles(ContextCompileFailed)
    def failed(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: compilation_events.ContextCompileFailed = stored.event  # type: ignore[assignment]
        rows.update(
            ContextCompilation,
            as_uuid(event.request_id),
            status=compilation_events.REQUEST_FAILED,
            error={"code": event.code, "message": event.message, "field": event.field},
            finished_at=stored.recorded_at,
            version=stored.version,
        )

    @handles(ContextCompacted)
    def compacted(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: compilation_events.ContextCompacted = stored.event  # type: ignore[assignment]
        fold_id = as_uuid(event.fold_id)
        project_id = as_uuid(stored.project_id)
        rows.insert(
            CompactionFold,
            fold_id=fold_id,
            project_id=project_id,
            task_id=as_uuid(event.task_id),
            goal_id=as_uuid(event.goal_id),
            summary_id=as_uuid(event.summary_id),
            folded_ids=list(event.folded_ids),
            folded_tokens=event.folded_tokens,
            threshold=event.threshold,
            encoding=event.encoding,
            summarizer=event.summarizer,
            position=stored.position,
            actor=str(stored.metadata.get("actor", "")),
            recorded_at=stored.recorded_at,
        )
        for item_id in event.folded_ids:
            if rows.get(FoldedItem, as_uuid(item_id)) is None:
                rows.insert(
                    FoldedItem,
                    item_id=as_uuid(item_id),
                    fold_id=fold_id,
                    project_id=project_id,
                    task_id=as_uuid(event.task_id),
                )


def _new_row(
    stored: StoredEvent, request_id: str, task_id: str, goal_id: str, model_word: str
) -> dict[str, Any]:
    return {
        "request_id": as_uuid(request_id),
        "project_id": as_uuid(stored.project_id),
        "task_id": as_uuid(task_id),
        "goal_id": as_uuid(goal_id),
        "model_word": model_word,
        "actor": str(stored.metadata.get("actor", "")),
        "requested_at": stored.recorded_at,
        "version": stored.version,
    }


class UsageProjection(Projection):
    """The usage ledger (``ContextUsageReported``): one row per provider report."""

    models = (ContextUsage,)

    @handles(ContextUsageReported)
    def reported(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: ContextUsageReported = stored.event  # type: ignore[assignment]
        rows.insert(
            ContextUsage,
            usage_id=as_uuid(event.usage_id),
            project_id=as_uuid(stored.project_id),
            digest=event.digest,
            task_id=as_uuid(event.task_id),
            goal_id=as_uuid(event.goal_id),
            model_word=event.model_word,
            card_word=event.card_word,
            nexum_tokens=event.nexum_tokens,
            provider=event.provider,
            provider_model=event.model,
            prompt_tokens=event.prompt_tokens,
            completion_tokens=event.completion_tokens,
            cost=None if event.cost is None else Decimal(event.cost),
            drift=drift(event.prompt_tokens, event.nexum_tokens),
            position=stored.position,
            actor=str(stored.metadata.get("actor", "system"))[:200],
            recorded_at=stored.recorded_at,
        )


class RetentionProjection(Projection):
    """What retention pruned, by digest (``ContextPruned``, ``BundlePruned``, ``CheckOutputPruned``)."""

    models = (PrunedContent,)

    @handles(ContextPruned)
    def context_pruned(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: retention.ContextPruned = stored.event  # type: ignore[assignment]
        self._pruned(stored, rows, retention.CONTEXTS, event.digest, event.bytes_freed)

    @handles(BundlePruned)
    def bundle_pruned(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: retention.BundlePruned = stored.event  # type: ignore[assignment]
        self._pruned(stored, rows, retention.BUNDLES, event.digest, event.bytes_freed)

    @handles(CheckOutputPruned)
    def check_output_pruned(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        event: retention.CheckOutputPruned = stored.event  # type: ignore[assignment]
        self._pruned(stored, rows, retention.CHECK_OUTPUT, event.sha256, event.bytes_freed)

    @staticmethod
    def _pruned(stored: StoredEvent, rows: ReadModelRows, kind: str, digest: str, bytes_freed: int) -> None:
        pruned_id = uuid.uuid5(PRUNE_IDS, f"{stored.project_id}/{kind}/{digest}/{stored.position}")
        rows.insert(
            PrunedContent,
            id=pruned_id,
            project_id=as_uuid(stored.project_id),
            kind=kind,
            digest=digest,
            bytes_freed=bytes_freed,
            position=stored.position,
            pruned_at=stored.recorded_at,
        )
