"""Writes of the context resolver (SPEC R1–R11). Every change is an event; read models follow by projection.

Authority (R3, R4): every write that creates or changes a grant, a source, an escalation's outcome, the plan
gate or a task's state takes ``content_trust`` (the trust class of the content the request derives from) and
``derived_from`` (digests of bundle items it derives from) and refuses, with ``require_authority``, anything
that rests on content below ``repository_authored``. An unknown digest counts as untrusted.

Signing keys (R3) never enter the log: ``settings.NEXUM_SIGNING_KEYS`` maps a project's slug (or id) to its
HMAC-SHA256 key, read from the environment (``NEXUM_SIGNING_KEYS="acme=…,globex=…"``).

A resolve fetches its sources outside any database transaction (a slow source never holds the log's lock),
then decides and appends everything (retrievals, denials, the bundle, escalations) in one append to the task's
``context-<task_id>`` stream, at the version it read, with the bundle content stored by digest in the same
transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from context_app.resolution import selectors
from context_app.resolution.confinement import source_policy
from context_app.resolution.models import (
    BundleContent,
    BundleItem,
    Escalation,
    Grant,
    Resolve,
    Source,
    TaskContext,
    TaskQuestions,
)
from context_app.world import services as world_services
from nexum.adapters import telemetry
from nexum.adapters.source_policy import SourceNotAllowed
from nexum.adapters.sources.base import SourceRefused, fetch
from nexum.adapters.sources.registry import build_source
from nexum.adapters.tokenization import DEFAULT_ENCODING, counter_for
from nexum.core.digests import canonical_json
from nexum.core.errors import ConcurrencyError, Conflict, DomainError, NotFound, ValidationFailed
from nexum.core.events import Event
from nexum.core.ids import RESOLUTION_IDS
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.authorization import effective_grant, plan_retrievals
from nexum.core.resolution.checks import (
    build_query,
    check_grant_scopes,
    check_questions,
    check_reason,
    check_source_name,
    questions_to_data,
)
from nexum.core.resolution.escalations import EscalationAlreadyResolved, decide_pick_side, decide_plan_gate
from nexum.core.resolution.model import Freshness, ResolveBudget, SourceResult, SourceSpec
from nexum.core.resolution.record import resolve_events
from nexum.core.resolution.resolver import resolve_bundle
from nexum.core.resolution.settlements import settled_detail, settlement_of, settles
from nexum.core.trust import TrustClass, require_authority
from nexum.eventstore import store
from nexum.work.dispatch import BrokerUnavailable, publish
from tasks_app import selectors as task_selectors
from tasks_app import services as task_services
from tasks_app.models import Project, Task

MAX_SOURCE_LIMIT = 1000


def _now(now: datetime | None) -> datetime:
    value = now or timezone.now()
    if value.tzinfo is None:
        raise ValidationFailed("now must be timezone-aware", field="now")
    return value


# --- authority --------------------------------------------------------------------------------------------


def content_trust_of(
    *, project_id: str, content_trust: TrustClass | str | None = None, derived_from: Iterable[str] = ()
) -> list[TrustClass]:
    """The trust classes of what a request derives from: ``content_trust`` and the classes of the bundle
    items named by ``derived_from`` (an unknown digest counts as ``untrusted_retrieved``)."""
    classes = []
    if content_trust is not None:
        classes.append(TrustClass.parse(content_trust, field="content_trust"))
    digests = list(dict.fromkeys(derived_from))
    if digests:
        if not all(isinstance(d, str) for d in digests):
            raise ValidationFailed("derived_from lists item digests", field="derived_from")
        known: dict[str, TrustClass] = {}
        for digest, trust in BundleItem.objects.filter(project_id=project_id, digest__in=digests).values_list(
            "digest", "trust_class"
        ):
            current = TrustClass.parse(trust)
            known[digest] = min(known.get(digest, current), current)
        classes += [known.get(digest, TrustClass.untrusted_retrieved) for digest in digests]
    return classes


def check_authority(
    *,
    project_id: str,
    action: str,
    content_trust: TrustClass | str | None = None,
    derived_from: Iterable[str] = (),
) -> tuple[str, ...]:
    """Refuse ``action`` when it derives from content below ``repository_authored`` (R4); returns the
    digests it derives from, for the record."""
    digests = tuple(dict.fromkeys(derived_from))
    classes = content_trust_of(project_id=project_id, content_trust=content_trust, derived_from=digests)
    if classes:
        require_authority(classes, action)
    return digests


# --- sources (R1) -----------------------------------------------------------------------------------------


def source_register(
    *,
    project_id: str,
    name: str,
    kind: str,
    config: Mapping[str, Any],
    actor: str,
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Source:
    """Register a source: its configuration is checked by building it (``build_source``) under the project's
    source policy (a path or host outside it is 422 ``source_not_allowed``); an error names the option as
    ``config.<option>``. Who can write it is recorded (R4a): the agent for a path inside the workspace root,
    whatever the configuration declares, else ``config.writable_by`` (default the operator); a source the
    agent can write has ``highest_trust`` at most ``agent_reported``. A configuration is stored in the log,
    so it must never hold a secret."""
    project = task_selectors.project_get(project_id=project_id)
    check_authority(
        project_id=str(project.id),
        action="source.register",
        content_trust=content_trust,
        derived_from=derived_from,
    )
    check_source_name(name)
    if not isinstance(kind, str):
        raise ValidationFailed("kind must be a string", field="kind")
    if not isinstance(config, Mapping):
        raise ValidationFailed("config must be an object", field="config")
    try:
        canonical_json(dict(config))
    except (TypeError, ValueError) as error:
        raise ValidationFailed(f"config must be JSON: {error}", field="config") from None
    try:
        spec = build_source(kind, name, dict(config), policy=source_policy(project_slug=project.slug)).spec
    except DomainError as error:
        if error.field not in (None, "kind", "config"):
            error.field = f"config.{error.field}"
        raise
    source_id = str(uuid.uuid5(RESOLUTION_IDS, f"source:{project.id}:{name}"))
    if Source.objects.filter(project_id=project.id, name=name).exists():
        raise Conflict(f"a source named {name!r} already exists", field="name", code="source_exists")
    store.append(
        stream_id=resolution_events.source_stream(source_id),
        events=[
            resolution_events.SourceRegistered(
                source_id=source_id,
                name=name,
                kind=kind,
                config=dict(config),
                declared_scopes=spec.declared_scopes,
                highest_trust=spec.highest_trust.name,
                ttl_seconds=spec.freshness.ttl_seconds,
                track_revision=spec.freshness.track_revision,
                writable_by=spec.writable_by,
            )
        ],
        expected_version=0,
        actor=actor,
        project_id=str(project.id),
    )
    return Source.objects.get(id=source_id)


def source_spec(source: Source) -> SourceSpec:
    return SourceSpec(
        name=source.name,
        kind=source.kind,
        declared_scopes=tuple(source.declared_scopes),
        highest_trust=TrustClass.parse(source.highest_trust),
        freshness=Freshness(ttl_seconds=source.ttl_seconds, track_revision=source.track_revision),
        writable_by=source.writable_by,
    )


# --- grants (R2) ------------------------------------------------------------------------------------------


def grant_issue(
    *,
    project_id: str,
    sources: Mapping[str, Sequence[str]],
    actor: str,
    goal_id: str | None = None,
    task_id: str | None = None,
    expires_at: datetime | None = None,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
    now: datetime | None = None,
    idempotency_key: str | None = None,
) -> Grant:
    """Allow the resolver to read ``sources`` (name → scopes; ``[]`` or ``["*"]`` = every declared scope) for
    a goal (shared by its tasks) or one task, until ``expires_at`` if given. Every source must be one of the
    project's (another project's source is not found)."""
    project = task_selectors.project_get(project_id=project_id)
    digests = check_authority(
        project_id=str(project.id),
        action="grant.create",
        content_trust=content_trust,
        derived_from=derived_from,
    )
    if (goal_id is None) == (task_id is None):
        raise ValidationFailed("a grant belongs to exactly one goal or one task", field="scope")
    if goal_id is not None:
        goal = task_selectors.goal_get(project_id=project.id, goal_id=goal_id)
        scope_goal, scope_task = str(goal.id), None
    else:
        task = task_selectors.task_get(project_id=project.id, task_id=task_id)  # type: ignore[arg-type]
        scope_goal, scope_task = str(task.goal_id), (None if task.is_goal else str(task.id))
    scopes = check_grant_scopes(sources)
    known = set(
        Source.objects.filter(project_id=project.id, name__in=list(scopes)).values_list("name", flat=True)
    )
    missing = sorted(set(scopes) - known)
    if missing:
        raise NotFound(f"no source {missing[0]!r} in this project", field="sources")
    if expires_at is not None:
        if not isinstance(expires_at, datetime) or expires_at.tzinfo is None:
            raise ValidationFailed("expires_at must be a timezone-aware time", field="expires_at")
        if expires_at <= _now(now):
            raise ValidationFailed("expires_at is in the past", field="expires_at")
    reason = check_reason(reason)
    if idempotency_key is not None:
        grant_id = str(uuid.uuid5(RESOLUTION_IDS, f"grant:{project.id}:{idempotency_key}"))
    else:
        grant_id = str(uuid.uuid4())
    store.append(
        stream_id=resolution_events.grant_stream(grant_id),
        events=[
            resolution_events.GrantIssued(
                grant_id=grant_id,
                goal_id=scope_goal,
                task_id=scope_task,
                scopes={name: list(granted) for name, granted in scopes.items()},
                expires_at=expires_at.isoformat() if expires_at is not None else None,
                reason=reason,
                derived_from=digests,
            )
        ],
        expected_version=0,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=str(project.id),
    )
    return Grant.objects.get(id=grant_id)


def grant_revoke(
    *,
    project_id: str,
    grant_id: str,
    reason: str,
    actor: str,
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Grant:
    check_authority(
        project_id=project_id, action="grant.revoke", content_trust=content_trust, derived_from=derived_from
    )
    grant = selectors.grant_get(project_id=project_id, grant_id=grant_id)
    if grant.revoked_at is None:
        store.append(
            stream_id=resolution_events.grant_stream(str(grant.id)),
            events=[resolution_events.GrantRevoked(grant_id=str(grant.id), reason=check_reason(reason))],
            expected_version=grant.version,
            actor=actor,
            project_id=str(grant.project_id),
        )
        grant.refresh_from_db()
    return grant


# --- required questions (R7) ------------------------------------------------------------------------------


def questions_set(
    *,
    project_id: str,
    task_id: str,
    questions: Sequence[Mapping[str, Any]],
    actor: str,
    expected_version: int | None = None,
) -> TaskQuestions:
    """Replace the required questions of a task's step: ``[{question, subjects: [...]}, …]``."""
    task = _task(project_id, task_id)
    checked = check_questions(questions)
    row = TaskQuestions.objects.filter(task_id=task.id).first()
    current = row.version if row is not None else 0
    if expected_version is not None and expected_version != current:
        raise ConcurrencyError(
            f"the questions are at version {current}, not {expected_version}", field="expected_version"
        )
    store.append(
        stream_id=resolution_events.questions_stream(str(task.id)),
        events=[
            resolution_events.RequiredQuestionsSet(
                task_id=str(task.id),
                goal_id=str(task.goal_id),
                questions=questions_to_data(checked),
            )
        ],
        expected_version=current,
        actor=actor,
        project_id=str(task.project_id),
    )
    return TaskQuestions.objects.get(task_id=task.id)


# --- resolving (R2–R8, R11) -------------------------------------------------------------------------------


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
    task = _task(project_id, task_id)
    if task.is_goal:
        raise ValidationFailed("resolve the context of a task, not of a goal", field="task_id")
    project = task_selectors.project_get(project_id=str(task.project_id))
    stream_id = resolution_events.context_stream(str(task.id))
    idempotency_key = f"resolve:{request_id}" if request_id else None
    if request_id is not None:
        if not isinstance(request_id, str) or not 0 < len(request_id) <= 150:
            raise ValidationFailed("request_id must be 1–150 characters", field="request_id")
        resolve_id = resolve_id_for(task_id=str(task.id), request_id=request_id)
        done = Resolve.objects.filter(id=resolve_id).first()
        if done is not None:
            return ResolveOutcome(done, selectors.bundle_content(digest=done.bundle_digest))
    else:
        resolve_id = str(uuid.uuid4())
    now = _now(now)
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


def bundle_resolve_request(*, project_id: str, task_id: str, request_id: str, actor: str) -> None:
    """Queue ``bundle_resolve`` for a worker, by ids (R10); the request id makes a redelivery harmless.

    Unlike a compile or a completion, nothing is recorded before the worker runs it, so there is nothing for
    the dispatcher to send again: a broker that is down is ``BrokerUnavailable`` (503), with nothing queued or
    written. In process (Celery eager) it runs now."""
    from context_app.resolution.tasks import resolve_context  # the task module imports this one

    ids = {"project_id": project_id, "task_id": task_id, "request_id": request_id, "actor": actor}
    if not publish(resolve_context, kwargs=ids):
        raise BrokerUnavailable("the broker is unreachable: nothing was queued; send the request again later")


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


# --- escalations (R5–R7, I5) ------------------------------------------------------------------------------


def escalation_resolve(
    *,
    project_id: str,
    escalation_id: str,
    action: str,
    actor: str,
    text: str | None = None,
    subject: str | None = None,
    chosen: Sequence[str] = (),
    source: str | None = None,
    scopes: Sequence[str] | None = None,
    expires_at: datetime | None = None,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Escalation:
    """Close a gap by ``action`` (the API's and the escalation UI's entry point): the service of that action
    with the arguments it takes — ``escalation_supply_fact`` (``text``, ``subject``), ``escalation_pick_side``
    (``chosen``), ``escalation_grant_source`` (``source``, ``scopes``, ``expires_at``) or
    ``escalation_cancel``. Each is an event; the last open escalation resolved opens the plan gate."""
    common: dict[str, Any] = {
        "project_id": project_id,
        "escalation_id": escalation_id,
        "actor": actor,
        "reason": reason,
        "content_trust": content_trust,
        "derived_from": derived_from,
    }
    if action == resolution_events.RESOLVE_SUPPLY_FACT:
        return escalation_supply_fact(text=text, subject=subject, **common)
    if action == resolution_events.RESOLVE_PICK_SIDE:
        return escalation_pick_side(chosen=chosen, **common)
    if action == resolution_events.RESOLVE_GRANT_SOURCE:
        return escalation_grant_source(source=source, scopes=scopes, expires_at=expires_at, **common)
    if action == resolution_events.RESOLVE_CANCEL:
        return escalation_cancel(**common)
    raise ValidationFailed(
        f"action must be one of {', '.join(resolution_events.RESOLUTION_ACTIONS)}", field="action"
    )


def escalation_supply_fact(
    *,
    project_id: str,
    escalation_id: str,
    text: Any,
    actor: str,
    subject: str | None = None,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Escalation:
    """Close a gap with a fact the actor supplies: recorded as a verified, ``repository_authored`` fact with
    the actor as its source, on ``subject`` (by default the gap's first). For a conflict the fact is the
    goal's and it settles the conflict for the whole goal (``_settled_with``); otherwise it is the task's."""
    opening = _opening(
        project_id=project_id,
        escalation_id=escalation_id,
        action=resolution_events.RESOLVE_SUPPLY_FACT,
        reason=reason,
        content_trust=content_trust,
        derived_from=derived_from,
    )
    escalation, task = opening.escalation, opening.task
    if not isinstance(text, str) or not text.strip():
        raise ValidationFailed("supply the missing fact as text", field="text")
    scope = {"goal_id": str(task.goal_id)} if escalation.kind == "conflict" else {"task_id": str(task.id)}
    with transaction.atomic():
        fact = world_services.fact_record(
            scope=world_services.scope_resolve(project_id=project_id, **scope),
            text=text,
            source=actor,
            subject=subject if subject is not None else (escalation.subjects or [""])[0],
            verified=True,
            trust_class="repository_authored",
            actor=actor,
        )
        return _record_resolution(opening, detail={"fact_id": str(fact.id)}, actor=actor)


def escalation_pick_side(
    *,
    project_id: str,
    escalation_id: str,
    chosen: Sequence[str],
    actor: str,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Escalation:
    """Settle a conflict by keeping ``chosen`` (item digests of its members): the other members stay on the
    record, marked rejected, and are left out of the compile of every task of the goal that sees the
    subject; the goal's other open conflicts among the same members close with it (``_settled_with``)."""
    opening = _opening(
        project_id=project_id,
        escalation_id=escalation_id,
        action=resolution_events.RESOLVE_PICK_SIDE,
        reason=reason,
        content_trust=content_trust,
        derived_from=derived_from,
    )
    escalation = opening.escalation
    evidence = [entry["digest"] for entry in escalation.evidence]
    if escalation.kind != "conflict":
        raise ValidationFailed("only a conflict has sides to pick", field="action")
    rejected = decide_pick_side(evidence, list(chosen))
    with transaction.atomic():
        detail = {"chosen": sorted(set(chosen)), "rejected": list(rejected)}
        return _record_resolution(opening, detail=detail, actor=actor)


def escalation_grant_source(
    *,
    project_id: str,
    escalation_id: str,
    source: Any,
    actor: str,
    scopes: Sequence[str] | None = None,
    expires_at: datetime | None = None,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Escalation:
    """Close a gap by granting the task ``source`` (``scopes``, default every declared scope, until
    ``expires_at`` if given): the next resolve reads it."""
    opening = _opening(
        project_id=project_id,
        escalation_id=escalation_id,
        action=resolution_events.RESOLVE_GRANT_SOURCE,
        reason=reason,
        content_trust=content_trust,
        derived_from=derived_from,
    )
    if not isinstance(source, str):
        raise ValidationFailed("name the source to grant", field="source")
    with transaction.atomic():
        grant = grant_issue(
            project_id=project_id,
            task_id=str(opening.task.id),
            sources={source: list(scopes or ["*"])},
            expires_at=expires_at,
            reason=opening.reason or f"escalation {opening.escalation.id}",
            derived_from=opening.digests,
            actor=actor,
        )
        return _record_resolution(opening, detail={"grant_id": str(grant.id), "source": source}, actor=actor)


def escalation_cancel(
    *,
    project_id: str,
    escalation_id: str,
    actor: str,
    reason: str = "",
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> Escalation:
    """Close a gap by cancelling its task: every open escalation on the task is closed with it."""
    opening = _opening(
        project_id=project_id,
        escalation_id=escalation_id,
        action=resolution_events.RESOLVE_CANCEL,
        reason=reason,
        content_trust=content_trust,
        derived_from=derived_from,
    )
    task, escalation = opening.task, opening.escalation
    with transaction.atomic():
        if task.state != "cancelled":
            task_services.task_cancel(
                project_id=project_id,
                task_id=str(task.id),
                reason=opening.reason or f"escalation {escalation.id}",
                actor=actor,
            )
        others = Escalation.objects.filter(task_id=task.id, state=resolution_events.ESCALATION_OPEN).exclude(
            id=escalation.id
        )
        return _record_resolution(
            opening, detail={}, actor=actor, cancelled=list(others.order_by("position"))
        )


@dataclass(frozen=True)
class _Opening:
    """An open escalation an action may close, its task, the digests the request derives from (checked),
    and the checked reason."""

    action: str
    escalation: Escalation
    task: Task
    digests: tuple[str, ...]
    reason: str


def _opening(
    *,
    project_id: str,
    escalation_id: str,
    action: str,
    reason: str,
    content_trust: TrustClass | str | None,
    derived_from: Sequence[str],
) -> _Opening:
    """The checks every action makes first: the escalation is the project's, the request rests on nothing
    below ``repository_authored`` (R4), the reason is well-formed, and the escalation is still open."""
    escalation = selectors.escalation_get(project_id=project_id, escalation_id=escalation_id)
    digests = check_authority(
        project_id=project_id,
        action=f"escalation.{action}",
        content_trust=content_trust,
        derived_from=derived_from,
    )
    reason = check_reason(reason)
    if escalation.state != resolution_events.ESCALATION_OPEN:
        raise EscalationAlreadyResolved(
            f"escalation {escalation.id} is already resolved ({escalation.resolution})",
            field="escalation_id",
        )
    task = task_selectors.task_get(project_id=project_id, task_id=escalation.task_id)
    return _Opening(action, escalation, task, digests, reason)


def _record_resolution(
    opening: _Opening, *, detail: dict[str, Any], actor: str, cancelled: Sequence[Escalation] = ()
) -> Escalation:
    """Append the resolution: ``EscalationResolved`` for the escalation (and for the ``cancelled`` ones with
    it), and for a settled conflict one for each open conflict of the goal it settles too, each on its own
    task's stream (``detail.settled_by`` naming this one). Returns the escalation as it is now."""
    escalation, task, action = opening.escalation, opening.task, opening.action
    resolved: dict[str, list[Event]] = {
        str(task.id): [
            resolution_events.EscalationResolved(
                escalation_id=str(item.id),
                task_id=str(task.id),
                resolution=action,
                detail=detail if item.id == escalation.id else {"cancelled_with": str(escalation.id)},
                reason=opening.reason,
            )
            for item in sorted([escalation, *cancelled], key=lambda e: e.position)
        ]
    }
    for other in _settled_with(escalation, action, detail):
        resolved.setdefault(str(other.task_id), []).append(
            resolution_events.EscalationResolved(
                escalation_id=str(other.id),
                task_id=str(other.task_id),
                resolution=action,
                detail=settled_detail(
                    detail,
                    settled_by=str(escalation.id),
                    members=[entry["digest"] for entry in other.evidence],
                ),
                reason=opening.reason,
            )
        )
    for task_id, events in resolved.items():
        store.append(
            stream_id=resolution_events.context_stream(task_id),
            events=events,
            expected_version=TaskContext.objects.get(task_id=task_id).version,
            actor=actor,
            project_id=str(task.project_id),
        )
    escalation.refresh_from_db()
    return escalation


def _settled_with(escalation: Escalation, action: str, detail: Mapping[str, Any]) -> list[Escalation]:
    """The open conflicts of the goal (other than ``escalation``) that its settlement decides too."""
    settlement = settlement_of(
        escalation_id=str(escalation.id),
        kind=escalation.kind,
        subjects=escalation.subjects,
        members=[entry["digest"] for entry in escalation.evidence],
        resolution=action,
        detail=detail,
    )
    if settlement is None:
        return []
    candidates = Escalation.objects.filter(
        goal_id=escalation.goal_id, kind="conflict", state=resolution_events.ESCALATION_OPEN
    ).exclude(id=escalation.id)
    return [
        other
        for other in candidates.order_by("position")
        if settles(
            settlement,
            kind=other.kind,
            subjects=other.subjects,
            members=[entry["digest"] for entry in other.evidence],
        )
    ]


# --- the plan gate (R9) -----------------------------------------------------------------------------------


def plan_gate_check(*, project_id: str, task_id: str) -> None:
    """Raise ``PlanGateClosed`` (422 ``plan_gate_closed``) while the task's latest bundle leaves an
    escalation open, unless an operator overrode the gate for that bundle."""
    head = TaskContext.objects.filter(project_id=project_id, task_id=task_id).first()
    if head is None or head.latest_resolve_id is None:
        return
    open_escalations = [
        {"id": str(e.id), "kind": e.kind, "missing": e.missing}
        for e in Escalation.objects.filter(task_id=task_id, state=resolution_events.ESCALATION_OPEN).order_by(
            "position"
        )
    ]
    decide_plan_gate(
        has_bundle=True,
        complete=bool(head.complete),
        open_escalations=open_escalations,
        overridden=head.overridden,
    )


def plan_gate_override(
    *,
    project_id: str,
    task_id: str,
    reason: str,
    actor: str,
    content_trust: TrustClass | str | None = None,
    derived_from: Sequence[str] = (),
) -> TaskContext:
    """An operator lets the task start despite the open gaps of its latest bundle (recorded). A later
    resolve closes the gate again if gaps remain."""
    check_authority(
        project_id=project_id,
        action="plan_gate.override",
        content_trust=content_trust,
        derived_from=derived_from,
    )
    task = _task(project_id, task_id)
    reason = check_reason(reason)
    if not reason.strip():
        raise ValidationFailed("an override needs a reason", field="reason")
    head = TaskContext.objects.filter(task_id=task.id).first()
    if head is None or head.latest_resolve_id is None:
        raise Conflict("the task has no resolved bundle; there is no gate to override", field="task_id")
    store.append(
        stream_id=resolution_events.context_stream(str(task.id)),
        events=[
            resolution_events.PlanGateOverridden(
                task_id=str(task.id),
                resolve_id=str(head.latest_resolve_id),
                bundle_digest=head.latest_bundle_digest,
                reason=reason,
            )
        ],
        expected_version=head.version,
        actor=actor,
        project_id=str(task.project_id),
    )
    head.refresh_from_db()
    return head


# --- helpers ----------------------------------------------------------------------------------------------


def _task(project_id: str, task_id: Any) -> Task:
    return task_selectors.task_get(project_id=project_id, task_id=task_id)
