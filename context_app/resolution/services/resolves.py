"""Resolving a task's context (SPEC R2–R8, R10, R11), here or on a worker (``resolve_requests``).

A resolve fetches its sources outside any database transaction (a slow source never holds the log's lock),
then decides and appends everything (retrievals, denials, the bundle, escalations) in one append to the task's
``context-<task_id>`` stream, at the version it read, with the bundle content stored by digest in the same
transaction.

Signing keys (R3) never enter the log: ``settings.NEXUM_SIGNING_KEYS`` maps a project's slug (or id) to its
HMAC-SHA256 key, read from the environment (``NEXUM_SIGNING_KEYS="acme=…,globex=…"``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from context_app.resolution import selectors
from context_app.resolution.confinement import source_policy
from context_app.resolution.models import BundleContent, Escalation, Resolve, Source, TaskContext
from context_app.resolution.services.clock import aware_now
from context_app.resolution.services.sources import source_spec
from nexum.adapters import telemetry
from nexum.adapters.source_policy import SourceNotAllowed
from nexum.adapters.sources.base import SourceRefused, fetch
from nexum.adapters.sources.registry import build_source
from nexum.adapters.tokenization import DEFAULT_ENCODING, counter_for
from nexum.core.digests import canonical_json
from nexum.core.errors import ValidationFailed
from nexum.core.ids import RESOLUTION_IDS
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.authorization import effective_grant, plan_retrievals
from nexum.core.resolution.model import ResolveBudget, SourceResult
from nexum.core.resolution.record import resolve_events
from nexum.core.resolution.resolver import resolve_bundle
from nexum.core.resolution.validation import build_query, validate_resolve_request_id
from nexum.eventstore import store
from tasks_app import selectors as task_selectors
from tasks_app.models import Project, Task

MAX_SOURCE_LIMIT = 1000


@dataclass(frozen=True)
class ResolveOutcome:
    resolve: Resolve
    bundle: dict[str, Any]
    """The bundle's stored content plus its digest."""


def _built(source: Source, project: Project, now: datetime) -> Any:
    """The source as configured, confined by the project's source policy as it is now."""
    return build_source(
        source.kind,
        source.name,
        source.config,
        policy=source_policy(project_slug=project.slug),
        clock=lambda: now,
    )


def default_budget() -> ResolveBudget:
    configured = getattr(settings, "NEXUM_RESOLVE_BUDGET", {}) or {}
    return ResolveBudget(
        max_items=int(configured.get("max_items", 40)), max_tokens=int(configured.get("max_tokens", 8000))
    )


def signing_key_for(project: Project) -> str | None:
    keys = getattr(settings, "NEXUM_SIGNING_KEYS", {}) or {}
    return keys.get(project.slug) or keys.get(str(project.id)) or None


def bundle_resolve(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    request_id: str | None = None,
    budget: ResolveBudget | None = None,
    requested: Mapping[str, Sequence[str]] | None = None,
    query: str | None = None,
    now: datetime | None = None,
) -> ResolveOutcome:
    """Resolve the context of a task's step and record the outcome.

    Only the sources and scopes the task's grants allow (its own and its goal's, in force at ``now``) are
    called; every call and every denial is an event. A source that fails makes the bundle incomplete, never
    the resolve. Gaps that matter open escalations; gaps a later resolve no longer shows are closed, but only
    by the task's own resolve: one narrowed by ``budget``, ``requested`` sources or ``query`` closes none.
    ``request_id`` makes the call idempotent (a redelivered Celery message writes nothing twice). Traced as
    ``nexum.resolve``.
    """
    with telemetry.span("nexum.resolve", project_id=str(project_id), task_id=str(task_id)) as traced:
        outcome = _bundle_resolve(
            project_id=project_id,
            task_id=task_id,
            actor=actor,
            request_id=request_id,
            budget=budget,
            requested=requested,
            query=query,
            now=now,
        )
        traced.set(resolve_id=str(outcome.resolve.id), digest=outcome.resolve.bundle_digest)
        return outcome


def _bundle_resolve(
    *,
    project_id: str,
    task_id: str,
    actor: str,
    request_id: str | None,
    budget: ResolveBudget | None,
    requested: Mapping[str, Sequence[str]] | None,
    query: str | None,
    now: datetime | None,
) -> ResolveOutcome:
    narrowed = any(option is not None for option in (budget, requested, query))
    task = resolvable_task(project_id=project_id, task_id=task_id)
    project = task_selectors.project_get(project_id=str(task.project_id))
    stream_id = resolution_events.context_stream(str(task.id))
    idempotency_key = f"resolve:{request_id}" if request_id else None
    if request_id is not None:
        request_id = validate_resolve_request_id(request_id)
        resolve_id = resolve_id_for(task_id=str(task.id), request_id=request_id)
        done = Resolve.objects.filter(id=resolve_id).first()
        if done is not None:
            return ResolveOutcome(done, selectors.bundle_content(digest=done.bundle_digest))
    else:
        resolve_id = str(uuid.uuid4())
    now = aware_now(now)
    budget = budget or default_budget()
    if requested is not None and (
        not isinstance(requested, Mapping)
        or not all(
            isinstance(name, str)
            and isinstance(scopes, list | tuple)
            and all(isinstance(s, str) for s in scopes)
            for name, scopes in requested.items()
        )
    ):
        raise ValidationFailed("sources must map source names to lists of scopes", field="sources")
    sources = list(Source.objects.filter(project_id=project.id).order_by("name"))
    specs = [source_spec(source) for source in sources]
    grant = effective_grant(selectors.grant_records(task=task), now)
    questions = selectors.task_questions(task_id=str(task.id))
    if query is None:
        query = build_query(task.objective, task.inputs, questions)
    elif not isinstance(query, str) or len(query) > 4000:
        raise ValidationFailed("query must be a string of at most 4000 characters", field="query")

    plan = plan_retrievals(grant, specs, now=now, requested=requested)
    by_name = {source.name: source for source in sources}
    limit = min(max(budget.max_items * 2, 1), MAX_SOURCE_LIMIT)
    results = [_call(by_name[call.source], project, call.scopes, query, limit, now) for call in plan.calls]
    bundle = resolve_bundle(
        grant=grant,
        sources=specs,
        results=results,
        questions=questions,
        budget=budget,
        risk=task.risk,
        now=now,
        count_tokens=counter_for(DEFAULT_ENCODING).count,
        signing_key=signing_key_for(project),
        requested=requested,
        step_inputs=tuple(task.inputs),
        success_criteria=tuple(task.success_criteria),
    )
    with transaction.atomic():
        head = TaskContext.objects.filter(task_id=task.id).first()
        version = head.version if head is not None else 0
        existing = Escalation.objects.filter(task_id=task.id)
        events = resolve_events(
            task_id=str(task.id),
            goal_id=str(task.goal_id),
            resolve_id=resolve_id,
            query=query,
            calls=plan.calls,
            results=results,
            bundle=bundle,
            open_by_key={e.key: str(e.id) for e in existing if e.state == resolution_events.ESCALATION_OPEN},
            resolved_keys={e.key for e in existing if e.state == resolution_events.ESCALATION_RESOLVED},
            settlements=selectors.goal_settlements(goal_id=task.goal_id),
            narrowed=narrowed,
        )
        content = bundle.content()
        BundleContent.objects.get_or_create(
            digest=bundle.digest,
            defaults={"content": content, "size": len(canonical_json(content)), "created_at": now},
        )
        store.append(
            stream_id=stream_id,
            events=events,
            expected_version=version,
            idempotency_key=idempotency_key,
            actor=actor,
            project_id=str(project.id),
        )
    resolve = Resolve.objects.get(id=resolve_id)
    return ResolveOutcome(resolve, selectors.bundle_content(digest=resolve.bundle_digest))


def resolvable_task(*, project_id: str, task_id: str) -> Task:
    """The task whose context a resolve (here or queued) gathers: another project's is ``NotFound``, a
    goal's id ``ValidationFailed``."""
    task = task_selectors.task_get(project_id=project_id, task_id=task_id)
    if task.is_goal:
        raise ValidationFailed("resolve the context of a task, not of a goal", field="task_id")
    return task


def resolve_id_for(*, task_id: str, request_id: str) -> str:
    """The id of the resolve a request id names (so a redelivery finds the resolve it already made)."""
    return str(uuid.uuid5(RESOLUTION_IDS, f"resolve:{task_id}:{request_id}"))


def _call(
    source: Source, project: Project, scopes: Sequence[str], query: str, limit: int, now: datetime
) -> SourceResult:
    """One authorized call. A source that cannot be built (its configuration no longer passes the source
    policy, say) or answer is a failed result, never an error."""
    try:
        built = _built(source, project, now)
        return fetch(built, query, scopes, limit)
    except SourceNotAllowed as refusal:
        return SourceResult.failed(source.name, refusal.message, kind=SourceRefused.kind)
    except Exception as error:  # a broken configuration or plugin must not fail the resolve (R11)
        message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
        return SourceResult.failed(source.name, str(message), kind="error")
