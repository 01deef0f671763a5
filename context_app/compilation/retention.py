"""Retention (issue 27 item 4): prune a project's stored compiled contexts, bundles and check output older
than its policy to their digests and metadata.

What is pruned, and what is kept because something still reads it:

* a stored context whose last compile (its own, or a later compile that gave the same digest) finished before
  the cutoff loses its prompt block and exclusion runs; its digest, budget, inclusions, token counts and
  position stay, and so do the events and the compile evidence. A read of it recompiles it at its position
  and shows it only when the digest matches (``services.replays.context_content``); its replay works as
  before.
* a bundle created before the cutoff loses its content unless a stored context was compiled from it (a
  replay of that context reads it), it is a task's latest (the next compile reads it), an escalation names
  it, or another project's resolve produced it too (its policy is its own).
* a check run's output recorded before the cutoff is removed from the artifact store unless a check run of
  another project or a newer one, a completion's answer or an artifact has the same content.

Each prune is an event (``ContextPruned``, ``BundlePruned``, ``CheckOutputPruned``: digests and byte counts)
on the project's ``retention-<project_id>`` stream, appended in the transaction that drops the content, so
``pruned_digests`` lists what was pruned. A dry run counts the same and writes nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from context_app.compilation.models import (
    RETENTION_DONE,
    RETENTION_PENDING,
    ContextCompilation,
    PrunedContent,
    RetentionRun,
    StoredContext,
)
from context_app.resolution.models import BundleContent, Escalation, Resolve, TaskContext
from context_app.world.artifacts import default_store
from context_app.world.models import WorldItem
from nexum.core.compilation.retention import (
    BUNDLES,
    CHECK_OUTPUT,
    CONTEXTS,
    PRUNED_KINDS,
    BundlePruned,
    CheckOutputPruned,
    ContextPruned,
    retention_stream,
    validate_retention_days,
)
from nexum.core.events import DomainEvent
from nexum.core.ids import RETENTION_RUN_IDS
from nexum.eventstore import reading, store
from tasks_app.models import Project
from tasks_app.selectors import project_get
from verification_app.models import CheckRun, CompletionRequest

logger = logging.getLogger(__name__)

BATCH = 200
"""Prunes per transaction: a long run holds no lock for long and a failure loses one batch's work."""

RETENTION_ACTOR = "system:retention"

SETTINGS = {
    CONTEXTS: "NEXUM_RETENTION_CONTEXT_DAYS",
    BUNDLES: "NEXUM_RETENTION_BUNDLE_DAYS",
    CHECK_OUTPUT: "NEXUM_RETENTION_CHECK_OUTPUT_DAYS",
}

T = TypeVar("T")


@dataclass
class PruneCount:
    count: int = 0
    bytes_freed: int = 0


@dataclass
class PruneSummary:
    """What one run pruned (or, dry, would prune), by kind."""

    project_id: str
    dry_run: bool
    contexts: PruneCount
    bundles: PruneCount
    check_output: PruneCount

    @property
    def pruned(self) -> int:
        return self.contexts.count + self.bundles.count + self.check_output.count

    @property
    def bytes_freed(self) -> int:
        return self.contexts.bytes_freed + self.bundles.bytes_freed + self.check_output.bytes_freed


def default_days(kind: str) -> int | None:
    """The service's days for ``kind`` (``NEXUM_RETENTION_…_DAYS``), checked; ``None``: kept for ever."""
    name = SETTINGS[kind]
    return validate_retention_days(getattr(settings, name, None), field=name)


def effective_policy(project: Project) -> dict[str, int | None]:
    """Days each kind is kept in ``project``: its own policy's member, else the service's default."""
    own = {
        CONTEXTS: project.retention_context_days,
        BUNDLES: project.retention_bundle_days,
        CHECK_OUTPUT: project.retention_check_output_days,
    }
    return {kind: own[kind] if own[kind] is not None else default_days(kind) for kind in PRUNED_KINDS}


def pruned_digests(*, project_id: str, kind: str | None = None) -> list[str]:
    """The digests retention pruned in the project (of one kind, or all), in the order they were pruned."""
    rows = PrunedContent.objects.filter(project_id=project_id)
    if kind is not None:
        rows = rows.filter(kind=kind)
    return list(rows.order_by("position").values_list("digest", flat=True))


def pruned_at(*, project_id: str, kind: str, digest: str) -> datetime | None:
    """When retention pruned ``digest`` of ``kind`` in the project; ``None``: it did not."""
    row = PrunedContent.objects.filter(project_id=project_id, kind=kind, digest=digest).first()
    return None if row is None else row.pruned_at


def pruned_totals(*, project_id: str) -> dict[str, int]:
    """How many of each kind retention pruned in the project, and the bytes freed in all."""
    rows = PrunedContent.objects.filter(project_id=project_id)
    counts = dict(rows.values_list("kind").annotate(count=Count("id")).values_list("kind", "count"))
    freed = rows.aggregate(total=Sum("bytes_freed"))["total"] or 0
    return {**{kind: counts.get(kind, 0) for kind in PRUNED_KINDS}, "bytes_freed": freed}


def project_prune(
    *, project_id: str, now: datetime | None = None, dry_run: bool = False, actor: str = RETENTION_ACTOR
) -> PruneSummary:
    """Apply the project's effective policy as of ``now``: prune what is older than each kind's days."""
    project = project_get(project_id=project_id)
    now = now or timezone.now()
    policy = effective_policy(project)
    summary = PruneSummary(str(project.id), dry_run, PruneCount(), PruneCount(), PruneCount())
    pruners = {
        CONTEXTS: (_prune_contexts, summary.contexts),
        BUNDLES: (_prune_bundles, summary.bundles),
        CHECK_OUTPUT: (_prune_check_output, summary.check_output),
    }
    for kind, (pruner, count) in pruners.items():
        days = policy[kind]
        if days is not None:
            pruner(project, now - timedelta(days=days), now, dry_run, actor, count)
    return summary


# --- contexts ---------------------------------------------------------------------------------------------


def _prune_contexts(
    project: Project, cutoff: datetime, now: datetime, dry_run: bool, actor: str, count: PruneCount
) -> None:
    recent = ContextCompilation.objects.filter(project_id=project.id, finished_at__gte=cutoff)
    recent = recent.values("digest")
    due = (
        StoredContext.objects.filter(project_id=project.id, pruned_at=None, stored_at__lt=cutoff)
        .exclude(digest__in=recent)
        .order_by("position", "digest")
    )
    for batch in _batches(due.values_list("id", flat=True)):
        with transaction.atomic():
            rows = list(
                StoredContext.objects.select_for_update()
                .filter(id__in=batch, pruned_at=None)
                .only("id", "digest", "task_id", "position", "prompt_block", "exclusion_runs")
            )
            events: list[DomainEvent] = []
            for row in rows:
                freed = len(row.prompt_block.encode()) + len(row.exclusion_runs.encode()) - len(b"[]")
                events.append(ContextPruned(row.digest, str(row.task_id), row.position, freed))
                count.count += 1
                count.bytes_freed += freed
            if dry_run or not events:
                continue
            _append(project, events, actor)
            StoredContext.objects.filter(id__in=[row.id for row in rows]).update(
                prompt_block="", exclusion_runs="[]", pruned_at=now
            )


# --- bundles ----------------------------------------------------------------------------------------------


def _prune_bundles(
    project: Project, cutoff: datetime, now: datetime, dry_run: bool, actor: str, count: PruneCount
) -> None:
    own = Resolve.objects.filter(project_id=project.id).values("bundle_digest")
    shared = Resolve.objects.exclude(project_id=project.id).values("bundle_digest")
    needed = (
        Q(digest__in=shared)
        | Q(digest__in=StoredContext.objects.values("bundle_digest"))
        | Q(digest__in=TaskContext.objects.values("latest_bundle_digest"))
        | Q(digest__in=Escalation.objects.values("bundle_digest"))
    )
    due = (
        BundleContent.objects.filter(digest__in=own, pruned_at=None, created_at__lt=cutoff)
        .exclude(needed)
        .order_by("digest")
    )
    for batch in _batches(due.values_list("digest", flat=True)):
        with transaction.atomic():
            rows = list(BundleContent.objects.select_for_update().filter(digest__in=batch, pruned_at=None))
            events: list[DomainEvent] = [BundlePruned(row.digest, row.size) for row in rows]
            count.count += len(rows)
            count.bytes_freed += sum(row.size for row in rows)
            if dry_run or not events:
                continue
            _append(project, events, actor)
            BundleContent.objects.filter(digest__in=[row.digest for row in rows]).update(
                content={}, size=0, pruned_at=now
            )


# --- check output -----------------------------------------------------------------------------------------


def _prune_check_output(
    project: Project, cutoff: datetime, now: datetime, dry_run: bool, actor: str, count: PruneCount
) -> None:
    del now  # the events' own time says when
    candidates = (
        CheckRun.objects.filter(project_id=project.id, recorded_at__lt=cutoff)
        .exclude(output_sha256="")
        .order_by("output_sha256")
        .values_list("output_sha256", flat=True)
        .distinct()
    )
    artifacts = default_store()
    for batch in _batches(candidates):
        kept = {
            *CheckRun.objects.filter(output_sha256__in=batch)
            .exclude(project_id=project.id, recorded_at__lt=cutoff)
            .values_list("output_sha256", flat=True),
            *CompletionRequest.objects.filter(answer_sha256__in=batch).values_list(
                "answer_sha256", flat=True
            ),
            *WorldItem.objects.filter(content_sha256__in=batch).values_list("content_sha256", flat=True),
        }
        paths = [(sha, artifacts.path_for(sha)) for sha in batch if sha not in kept]
        present = [(sha, path, path.stat().st_size) for sha, path in paths if path.is_file()]
        count.count += len(present)
        count.bytes_freed += sum(size for _, _, size in present)
        if dry_run or not present:
            continue
        with transaction.atomic():
            _append(project, [CheckOutputPruned(sha, size) for sha, _, size in present], actor)
            removed = [path for _, path, _ in present]
            transaction.on_commit(lambda removed=removed: _unlink(removed))


def _unlink(paths: list[Path]) -> None:
    """Remove pruned output once its events are committed (a file left by a failure here is harmless:
    content-addressed, and the next write of the same content reuses it)."""
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError as error:
            logger.warning("retention could not remove %s: %s", path, error)


# --- shared -----------------------------------------------------------------------------------------------


def _append(project: Project, events: list[DomainEvent], actor: str) -> None:
    stream = retention_stream(str(project.id))
    store.append(
        stream_id=stream,
        events=events,
        expected_version=reading.stream_version(stream),
        actor=actor,
        project_id=str(project.id),
    )


def _batches(values: Iterable[T]) -> Iterator[list[T]]:
    batch: list[T] = []
    for value in values:
        batch.append(value)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


# --- the periodic run (a work kind: context_app.compilation.tasks.RETENTION) -------------------------------


def retention_runs_record(*, now: datetime | None = None) -> int:
    """Record a run for each project whose effective policy prunes something and whose last run was
    requested ``NEXUM_RETENTION_INTERVAL_S`` ago or more (or never): the dispatcher's pass sends them. The
    number recorded."""
    now = now or timezone.now()
    since = now - timedelta(seconds=settings.NEXUM_RETENTION_INTERVAL_S)
    recorded = 0
    for project in Project.objects.all():
        if all(days is None for days in effective_policy(project).values()):
            continue
        if RetentionRun.objects.filter(project_id=project.id, requested_at__gt=since).exists():
            continue
        run_id = uuid.uuid5(RETENTION_RUN_IDS, f"{project.id}/{int(now.timestamp())}")
        _, created = RetentionRun.objects.get_or_create(
            id=run_id, defaults={"project_id": project.id, "requested_at": now}
        )
        recorded += created
    return recorded


def retention_run_execute(*, run_id: str) -> str:
    """Run one recorded retention run (once: a run already done is left as it is); its state afterwards."""
    run = RetentionRun.objects.filter(id=run_id).first()
    if run is None or run.state != RETENTION_PENDING:
        return RETENTION_DONE
    summary = project_prune(project_id=str(run.project_id))
    RetentionRun.objects.filter(id=run.id, state=RETENTION_PENDING).update(
        state=RETENTION_DONE,
        finished_at=timezone.now(),
        pruned=summary.pruned,
        bytes_freed=summary.bytes_freed,
    )
    logger.info(
        "retention of project %s pruned %d (%d bytes)", run.project_id, summary.pruned, summary.bytes_freed
    )
    return RETENTION_DONE
