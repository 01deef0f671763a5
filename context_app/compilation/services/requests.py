"""Queued compiles (C10): a request checked and recorded now (``ContextCompileRequested``) and sent to a
worker when its transaction commits (``tasks.COMPILE``), and the worker's side that answers it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from context_app.catalog import selectors as catalog_selectors
from context_app.compilation.models import ContextCompilation
from context_app.compilation.selectors.contexts import evidence_get
from context_app.compilation.services.compiles import compile_and_record
from context_app.compilation.services.request_inputs import (
    focus_text,
    store_evidence,
    store_focus,
    validate_evidence,
    validate_focus,
    validate_model_word,
    validate_request_id,
)
from context_app.compilation.tasks import COMPILE
from nexum.core.compilation import events as compilation_events
from nexum.core.errors import ConcurrencyError, DomainError, NotFound, ValidationFailed
from nexum.eventstore import reading, replica, store
from nexum.work.dispatch import send_on_commit
from tasks_app import selectors as task_selectors
from tasks_app.models import Task


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
    word = validate_model_word(model_word)
    evidence = validate_evidence(extra_evidence)
    focus = validate_focus(focus)
    request_id = validate_request_id(request_id)
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

    with transaction.atomic():
        evidence_digest = store_evidence(project_id, evidence)
        focus_digest = store_focus(project_id, focus)
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
    message) writes nothing; a refused compile records ``ContextCompileFailed``. With a read replica, the
    world is read from it once it has replayed the request itself, and so every write its caller made
    before (``nexum.eventstore.replica``)."""
    queued = ContextCompilation.objects.filter(request_id=request_id).first()
    if queued is None:
        return None
    if queued.status != compilation_events.REQUEST_QUEUED:
        return queued
    project_id = str(queued.project_id)
    try:
        task = Task.objects.get(id=queued.task_id, project_id=queued.project_id)
        evidence = (
            evidence_get(project_id=project_id, digest=queued.evidence_digest)
            if queued.evidence_digest
            else []
        )
        compile_and_record(
            task=task,
            word=queued.model_word,
            overrides=queued.overrides or None,
            evidence=evidence,
            compaction=queued.compaction,
            request_id=str(queued.request_id),
            expected_version=queued.version,
            focus=focus_text(project_id, queued.focus_digest),
            actor=actor,
            read_alias=_read_alias(queued),
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


def _read_alias(queued: ContextCompilation) -> str:
    """Where the worker reads the request's world: the replica once it holds the request's
    ``ContextCompileRequested`` (every write its caller made before comes before it in the project's log).
    Without a replica the request's position is not read."""
    if not replica.replica_configured():
        return replica.PRIMARY
    stream = reading.read_stream(compilation_events.compile_stream(str(queued.request_id)))
    return replica.read_alias(str(queued.project_id), stream[-1].project_position)
