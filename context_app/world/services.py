"""Writes to the world state (SPEC W1–W4): every change is an event; read models follow by projection.

Items are recorded in their own stream (``fact-<id>``, ``decision-<id>``, …). With an idempotency key the
item's id is derived from the key (and the project, kind and scope), so a retried request lands in the same
stream and the event store returns the original append instead of writing a second item.

Token counts (W4) are computed here, once per encoding in ``settings.NEXUM_ITEM_ENCODINGS`` (default
``cl100k_base``), from the item's rendered text, and carried in the event. ``item_token_counts_ensure`` adds
the counts of another encoding for items recorded before it was needed (one event per batch).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from context_app.world import selectors
from context_app.world.artifacts import default_store
from context_app.world.models import Tool, ToolScope, WorldItem
from nexum.adapters.tokenization import CachedCounter, counter_for
from nexum.core.digests import canonical_json, digest_of
from nexum.core.errors import ConcurrencyError, Conflict, NotFound, ValidationFailed
from nexum.core.events import Event
from nexum.core.ids import WORLD_IDS
from nexum.core.roles import caller_trust, trust_ceiling
from nexum.core.text import require_storable
from nexum.core.trust import TrustClass
from nexum.core.world.items import (
    DEFAULT_TRUST_CLASS,
    RECORDABLE_TRUST_CLASSES,
    SHA256_HEX,
    SHORT_MAX,
    TEXT_MAX,
    ArtifactRecorded,
    DecisionRecorded,
    FactRecorded,
    FactState,
    FailureRecorded,
    ItemTokensCounted,
    ProgressRecorded,
    ToolCallRecorded,
    ToolDefined,
    ToolRemoved,
    ToolScopeSet,
    check_tool_name,
    decide_retract,
    decide_supersede,
    decide_verify,
    item_stream,
    item_terms,
    render_artifact,
    render_decision,
    render_fact,
    render_failure,
    render_progress,
    render_tool,
    render_tool_call,
    token_counts,
    token_counts_stream,
    tool_scope_stream,
    tool_stream,
)
from nexum.eventstore import store
from tasks_app import selectors as task_selectors

SCHEMA_MAX_CHARS = 100_000
TOKEN_COUNT_BATCH = 1000


@dataclass(frozen=True)
class Scope:
    """Where an item belongs: a goal (``task_id`` None, shared by its tasks) or one task of the goal."""

    project_id: str
    goal_id: str
    task_id: str | None
    attempt: int | None = None

    @property
    def scope_id(self) -> str:
        return self.task_id or self.goal_id


def item_encodings() -> list[str]:
    return sorted(set(settings.NEXUM_ITEM_ENCODINGS))


def _counters(encodings: Iterable[str] | None = None) -> list[CachedCounter]:
    return [counter_for(name) for name in (item_encodings() if encodings is None else encodings)]


# --- scopes -----------------------------------------------------------------------------------------------


def scope_resolve(*, project_id: str, goal_id: str | None = None, task_id: str | None = None) -> Scope:
    """The scope of a goal or a task of ``project_id``; another project's goal or task is ``NotFound``.

    A goal addressed as a task is the goal's scope.
    """
    if (goal_id is None) == (task_id is None):
        raise ValidationFailed("an item belongs to exactly one goal or one task", field="scope")
    if goal_id is not None:
        goal = task_selectors.goal_get(project_id=project_id, goal_id=_uuid_text(goal_id, "goal_id"))
        return Scope(project_id, str(goal.id), None)
    task = task_selectors.task_get(project_id=project_id, task_id=_uuid_text(task_id, "task_id"))
    if getattr(task, "is_goal", False):
        return Scope(project_id, str(task.id), None)
    return Scope(project_id, str(task.goal_id), str(task.id), getattr(task, "attempt", None) or None)


# --- recording items --------------------------------------------------------------------------------------


def fact_record(
    *,
    scope: Scope,
    text: str,
    source: str = "",
    subject: str = "",
    observed_at: datetime | None = None,
    trust_class: str = DEFAULT_TRUST_CLASS,
    verified: bool = False,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    item_id = _new_item_id(scope, "fact", idempotency_key)
    event = _fact_event(
        scope,
        item_id,
        text=text,
        source=source,
        subject=subject,
        observed_at=observed_at,
        trust_class=trust_class,
        verified=verified,
        supersedes=None,
    )
    return _append_item(scope, "fact", event, actor=actor, idempotency_key=idempotency_key)


def decision_record(
    *,
    scope: Scope,
    text: str,
    rationale: str = "",
    trust_class: str = DEFAULT_TRUST_CLASS,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    text = _text(text, "text")
    rationale = _text(rationale, "rationale", required=False)
    rendered = render_decision(text, rationale=rationale)
    event = DecisionRecorded(
        **_common(scope, _new_item_id(scope, "decision", idempotency_key), text, trust_class, rendered, text),
        rationale=rationale,
    )
    return _append_item(scope, "decision", event, actor=actor, idempotency_key=idempotency_key)


def failure_record(
    *,
    scope: Scope,
    text: str,
    attempt: int | None = None,
    trust_class: str = DEFAULT_TRUST_CLASS,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    """A failure of a task; ``attempt`` defaults to the task's current attempt."""
    text = _text(text, "text")
    if attempt is None:
        attempt = scope.attempt
    if attempt is not None and (not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1):
        raise ValidationFailed("attempt must be a positive integer", field="attempt")
    rendered = render_failure(text, attempt=attempt)
    event = FailureRecorded(
        **_common(scope, _new_item_id(scope, "failure", idempotency_key), text, trust_class, rendered, text),
        attempt=attempt,
    )
    return _append_item(scope, "failure", event, actor=actor, idempotency_key=idempotency_key)


def progress_record(
    *,
    scope: Scope,
    text: str,
    trust_class: str = DEFAULT_TRUST_CLASS,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    text = _text(text, "text")
    rendered = render_progress(text)
    event = ProgressRecorded(
        **_common(scope, _new_item_id(scope, "progress", idempotency_key), text, trust_class, rendered, text)
    )
    return _append_item(scope, "progress", event, actor=actor, idempotency_key=idempotency_key)


def tool_call_record(
    *,
    scope: Scope,
    tool: str,
    result_summary: str,
    arguments: Any = None,
    arguments_digest: str | None = None,
    trust_class: str = DEFAULT_TRUST_CLASS,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    """A call of ``tool``; its arguments are kept only as a digest (given, or that of ``arguments``)."""
    check_tool_name(tool, field_name="tool")
    summary = _text(result_summary, "result_summary")
    if arguments_digest is None:
        try:
            arguments_digest = digest_of(arguments)
        except (TypeError, ValueError) as error:
            raise ValidationFailed(f"arguments must be JSON: {error}", field="arguments") from None
    elif not isinstance(arguments_digest, str) or not SHA256_HEX.match(arguments_digest):
        raise ValidationFailed("arguments_digest is 64 lowercase hex digits", field="arguments_digest")
    rendered = render_tool_call(tool=tool, arguments_digest=arguments_digest, result_summary=summary)
    item_id = _new_item_id(scope, "tool_call", idempotency_key)
    event = ToolCallRecorded(
        **_common(scope, item_id, summary, trust_class, rendered, f"{tool} {summary}"),
        tool=tool,
        arguments_digest=arguments_digest,
    )
    return _append_item(scope, "tool_call", event, actor=actor, idempotency_key=idempotency_key)


def artifact_record(
    *,
    scope: Scope,
    summary: str,
    uri: str = "",
    excerpt: str | None = None,
    media_type: str = "",
    content: bytes | None = None,
    trust_class: str = DEFAULT_TRUST_CLASS,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    """An artifact; ``content`` (if any) goes to the artifact store first, the event carries its digest only.

    Over the size limit: ``TooLarge`` and nothing stored. Without an excerpt, text content gives its first
    ``EXCERPT_CHARS`` characters.
    """
    summary = _text(summary, "summary")
    uri = _short(uri, "uri")
    media_type = _short(media_type, "media_type")
    if content is None and not uri:
        raise ValidationFailed("an artifact needs a uri or content", field="uri")
    artifact_store = default_store()
    if content is not None:
        artifact_store.check_size(len(content))
        if excerpt is None:
            excerpt = _text_excerpt(content)
    excerpt = _text(excerpt or "", "excerpt", required=False)
    if content is not None and not media_type:
        media_type = "text/plain" if _decodes(content) else "application/octet-stream"
    item_id = _new_item_id(scope, "artifact", idempotency_key)
    # Check the whole event before the content is written: a refused request stores nothing.
    rendered = render_artifact(uri=uri, summary=summary, excerpt=excerpt, media_type=media_type)
    common = _common(scope, item_id, summary, trust_class, rendered, summary)
    digest, size = None, None
    if content is not None:
        stored = artifact_store.put(content)
        digest, size = stored.sha256, stored.size
    event = ArtifactRecorded(
        **common,
        uri=uri,
        excerpt=excerpt,
        media_type=media_type,
        content_sha256=digest,
        content_size=size,
    )
    return _append_item(scope, "artifact", event, actor=actor, idempotency_key=idempotency_key)


EXCERPT_CHARS = 400


def _text_excerpt(content: bytes) -> str:
    if not _decodes(content):
        return ""
    return content.decode("utf-8").replace("\x00", "")[:EXCERPT_CHARS]


def _decodes(content: bytes) -> bool:
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# --- fact changes -----------------------------------------------------------------------------------------


def fact_verify(
    *,
    project_id: str,
    fact_id: str,
    note: str = "",
    expected_version: int | None = None,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    fact = selectors.fact_get(project_id=project_id, fact_id=fact_id)
    stream = item_stream("fact", str(fact.id))
    if _already_appended(stream, idempotency_key):
        return selectors.fact_get(project_id=project_id, fact_id=fact_id)
    version = _expected(fact, expected_version)
    events = decide_verify(_fact_state(fact), note=_text(note, "note", required=False))
    _append(stream, events, version, project_id, actor, idempotency_key)
    return selectors.fact_get(project_id=project_id, fact_id=fact_id)


def fact_retract(
    *,
    project_id: str,
    fact_id: str,
    reason: str,
    expected_version: int | None = None,
    role: str,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    """Retract a current fact (it stays in the history). ``role`` is the caller's: a fact above its trust
    ceiling is 403 (an agent never retracts what an operator recorded)."""
    fact = selectors.fact_get(project_id=project_id, fact_id=fact_id)
    stream = item_stream("fact", str(fact.id))
    if _already_appended(stream, idempotency_key):
        return selectors.fact_get(project_id=project_id, fact_id=fact_id)
    version = _expected(fact, expected_version)
    events = decide_retract(_fact_state(fact), reason=_text(reason, "reason"), ceiling=trust_ceiling(role))
    _append(stream, events, version, project_id, actor, idempotency_key)
    return selectors.fact_get(project_id=project_id, fact_id=fact_id)


def fact_supersede(
    *,
    project_id: str,
    fact_id: str,
    text: str,
    source: str | None = None,
    subject: str | None = None,
    observed_at: datetime | None = None,
    trust_class: str | None = None,
    verified: bool = False,
    reason: str = "",
    expected_version: int | None = None,
    role: str,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    """Record a new fact in the old one's scope that replaces it; the old fact stays, marked superseded.

    ``source``, ``subject`` and ``trust_class`` default to the old fact's. ``role`` is the caller's: a fact
    above its trust ceiling is 403, and so is a new fact claiming more than it. Returns the new fact.
    """
    old = selectors.fact_get(project_id=project_id, fact_id=fact_id)
    scope = Scope(project_id, str(old.goal_id), str(old.task_id) if old.task_id else None)
    new_id = (
        str(uuid.uuid5(WORLD_IDS, f"{project_id}/supersede/{old.id}/{idempotency_key}"))
        if idempotency_key is not None
        else str(uuid.uuid4())
    )
    new_stream = item_stream("fact", new_id)
    if _already_appended(new_stream, idempotency_key):
        return selectors.fact_get(project_id=project_id, fact_id=new_id)
    version = _expected(old, expected_version)
    superseded = decide_supersede(
        _fact_state(old),
        new_fact_id=new_id,
        reason=_text(reason, "reason", required=False),
        ceiling=trust_ceiling(role),
    )
    recorded = _fact_event(
        scope,
        new_id,
        text=text,
        source=old.source if source is None else source,
        subject=old.subject if subject is None else subject,
        observed_at=observed_at,
        trust_class=caller_trust(old.trust_class if trust_class is None else trust_class, role=role).name,
        verified=verified,
        supersedes=str(old.id),
    )
    with transaction.atomic():
        _append(item_stream("fact", str(old.id)), superseded, version, project_id, actor, idempotency_key)
        _append(new_stream, [recorded], 0, project_id, actor, idempotency_key)
    return selectors.fact_get(project_id=project_id, fact_id=new_id)


def _fact_event(
    scope: Scope,
    item_id: str,
    *,
    text: str,
    source: str,
    subject: str,
    observed_at: datetime | None,
    trust_class: str,
    verified: bool,
    supersedes: str | None,
) -> FactRecorded:
    text = _text(text, "text")
    source = _short(source, "source")
    subject = _short(subject, "subject")
    if not isinstance(verified, bool):
        raise ValidationFailed("verified must be true or false", field="verified")
    rendered = render_fact(text, subject=subject, source=source)
    return FactRecorded(
        **_common(scope, item_id, text, trust_class, rendered, subject, text),
        source=source,
        subject=subject,
        observed_at=_iso(observed_at),
        verified=verified,
        supersedes=supersedes,
    )


def _fact_state(fact: WorldItem) -> FactState:
    return FactState(
        fact_id=str(fact.id),
        status=fact.status,
        verified=fact.verified,
        trust_class=TrustClass.parse(fact.trust_class),
    )


def _expected(item: WorldItem | Tool | ToolScope | None, expected_version: int | None) -> int:
    current = item.version if item is not None else 0
    if expected_version is not None and expected_version != current:
        raise ConcurrencyError(
            f"the version is {current}, not the expected {expected_version}",
            field="expected_version",
            details={"current_version": current, "expected_version": expected_version},
        )
    return current


# --- tools ------------------------------------------------------------------------------------------------


def tool_define(
    *,
    project_id: str,
    name: str,
    description: str = "",
    schema: Mapping[str, Any] | None = None,
    pinned: bool = False,
    score: float | None = None,
    create_only: bool = False,
    expected_version: int | None = None,
    actor: str,
    idempotency_key: str | None = None,
) -> Tool:
    """Register a tool or replace its definition. ``create_only`` refuses a name already registered (409)."""
    check_tool_name(name)
    description = _text(description, "description", required=False)
    schema = dict(schema or {})
    try:
        schema_text = canonical_json(schema)
    except (TypeError, ValueError) as error:
        raise ValidationFailed(f"schema must be JSON: {error}", field="schema") from None
    _storable(schema_text, "schema")
    if len(schema_text) > SCHEMA_MAX_CHARS:
        raise ValidationFailed(f"schema is over {SCHEMA_MAX_CHARS} characters of JSON", field="schema")
    if not isinstance(pinned, bool):
        raise ValidationFailed("pinned must be true or false", field="pinned")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise ValidationFailed("score must be a finite number", field="score")
        score = float(score)
    stream = tool_stream(project_id, name)
    if _already_appended(stream, idempotency_key):
        return selectors.tool_get(project_id=project_id, name=name)
    existing = Tool.objects.filter(project_id=project_id, name=name).first()
    if create_only and existing is not None:
        raise Conflict(f"a tool named {name!r} is already registered", field="name", code="tool_exists")
    version = _expected(existing, expected_version)
    if version == 0:
        version = store.stream_version(stream)  # a removed tool's stream continues
    rendered = render_tool(name=name, description=description, schema=schema)
    event = ToolDefined(
        tool_id=_tool_id(project_id, name),
        name=name,
        description=description,
        schema=schema,
        pinned=pinned,
        score=score,
        token_counts=token_counts(rendered, _counters()),
        terms=list(item_terms(name.replace("_", " "), description)),
    )
    _append(stream, [event], version, project_id, actor, idempotency_key)
    return selectors.tool_get(project_id=project_id, name=name)


def tool_remove(*, project_id: str, name: str, expected_version: int | None = None, actor: str) -> None:
    tool = selectors.tool_get(project_id=project_id, name=name)
    version = _expected(tool, expected_version)
    _append(
        tool_stream(project_id, name),
        [ToolRemoved(tool_id=str(tool.id), name=name)],
        version,
        project_id,
        actor,
        None,
    )


def tool_scope_set(
    *,
    scope: Scope,
    allowed: list[str] | None,
    pinned: list[str],
    expected_version: int | None = None,
    actor: str,
    idempotency_key: str | None = None,
) -> ToolScope:
    """Narrow a goal's or task's tools to ``allowed`` (``None``: all) and pin some of them."""
    registered = set(Tool.objects.filter(project_id=scope.project_id).values_list("name", flat=True))
    for field_name, names in (("allowed", allowed or []), ("pinned", pinned)):
        for index, name in enumerate(names):
            check_tool_name(name, field_name=f"{field_name}.{index}")
            if name not in registered:
                raise NotFound(f"no tool named {name!r} is registered", field=f"{field_name}.{index}")
    if allowed is not None:
        outside = [name for name in pinned if name not in set(allowed)]
        if outside:
            raise ValidationFailed(f"pinned tool {outside[0]!r} is not in allowed", field="pinned")
    stream = tool_scope_stream(scope.scope_id)
    existing = ToolScope.objects.filter(id=scope.scope_id).first()
    if not _already_appended(stream, idempotency_key):
        version = _expected(existing, expected_version)
        event = ToolScopeSet(
            scope_id=scope.scope_id,
            goal_id=scope.goal_id,
            task_id=scope.task_id,
            allowed=sorted(set(allowed)) if allowed is not None else None,
            pinned=sorted(set(pinned)),
        )
        _append(stream, [event], version, scope.project_id, actor, idempotency_key)
    return ToolScope.objects.get(id=scope.scope_id)


def _tool_id(project_id: str, name: str) -> str:
    return str(uuid.uuid5(WORLD_IDS, f"{project_id}/tool/{name}"))


# --- token counts in another encoding (W4) ---------------------------------------------------------------


def item_token_counts_ensure(*, project_id: str, encoding: str, actor: str = "system") -> int:
    """Count, once, the items of the project that have no count in ``encoding``; returns how many."""
    counter = counter_for(encoding)  # an unknown encoding is refused here, before anything is read
    missing = [
        (str(item_id), rendered)
        for item_id, rendered, counts in WorldItem.objects.filter(project_id=project_id)
        .order_by("position")
        .values_list("id", "rendered", "token_counts")
        if encoding not in counts
    ]
    for start in range(0, len(missing), TOKEN_COUNT_BATCH):
        batch = missing[start : start + TOKEN_COUNT_BATCH]
        event = ItemTokensCounted(
            encoding=encoding, counts={item_id: counter.count(rendered) for item_id, rendered in batch}
        )
        # No version guard: a count is a pure function of the item's text; two writers record the same.
        _append(token_counts_stream(project_id), [event], None, project_id, actor, None)
    return len(missing)


# --- helpers ----------------------------------------------------------------------------------------------


def _common(
    scope: Scope, item_id: str, text: str, trust_class: str, rendered: str, *term_parts: str
) -> dict[str, Any]:
    if trust_class not in RECORDABLE_TRUST_CLASSES:
        raise ValidationFailed(
            f"trust_class must be one of {', '.join(RECORDABLE_TRUST_CLASSES)}; signed classes need a"
            " signature and are not recorded through this interface",
            field="trust_class",
        )
    return {
        "item_id": item_id,
        "goal_id": scope.goal_id,
        "task_id": scope.task_id,
        "text": text,
        "trust_class": trust_class,
        "token_counts": token_counts(rendered, _counters()),
        "terms": list(item_terms(*term_parts)),
    }


def _append_item(
    scope: Scope, kind: str, event: Event, *, actor: str, idempotency_key: str | None
) -> WorldItem:
    item_id = event.item_id  # type: ignore[attr-defined]
    _append(item_stream(kind, item_id), [event], 0, scope.project_id, actor, idempotency_key)
    return WorldItem.objects.get(id=item_id)


def _append(
    stream_id: str,
    events: list[Event],
    expected_version: int | None,
    project_id: str,
    actor: str,
    idempotency_key: str | None,
) -> store.AppendResult:
    return store.append(
        stream_id=stream_id,
        events=events,
        expected_version=expected_version,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=project_id,
    )


def _already_appended(stream_id: str, idempotency_key: str | None) -> bool:
    """Whether ``idempotency_key`` was used in ``stream_id``: a retry, answered with the current state."""
    return idempotency_key is not None and bool(store.appended_with_key(stream_id, idempotency_key))


def _new_item_id(scope: Scope, kind: str, idempotency_key: str | None) -> str:
    if idempotency_key is None:
        return str(uuid.uuid4())
    return str(uuid.uuid5(WORLD_IDS, f"{scope.project_id}/{kind}/{scope.scope_id}/{idempotency_key}"))


def _text(value: Any, field: str, *, required: bool = True, limit: int = TEXT_MAX) -> str:
    if not isinstance(value, str):
        raise ValidationFailed(f"{field} must be a string", field=field)
    _storable(value, field)
    value = value.strip()
    if required and not value:
        raise ValidationFailed(f"{field} must not be empty", field=field)
    if len(value) > limit:
        raise ValidationFailed(f"{field} is over {limit} characters", field=field)
    return value


def _storable(text: str, field: str) -> None:
    """Text every database keeps (``nexum.core.text``); a schema may not spell NUL as ``\\u0000`` either."""
    if field == "schema" and "\\u0000" in text:
        raise ValidationFailed(f"{field} must not contain NUL characters", field=field)
    require_storable(text, field)


def _short(value: Any, field: str) -> str:
    return _text(value, field, required=False, limit=SHORT_MAX)


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValidationFailed("observed_at needs a time zone", field="observed_at")
    try:
        return value.astimezone(UTC).isoformat()
    except (OverflowError, ValueError):
        raise ValidationFailed("observed_at is out of range", field="observed_at") from None


def _uuid_text(value: Any, field: str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise NotFound(f"no {field.removesuffix('_id')} {value}", field=field) from None
