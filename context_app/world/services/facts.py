"""Facts (SPEC W1–W3): recorded, verified, retracted (they stay in the history) or superseded by a new fact
in the old one's scope."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from django.db import transaction

from context_app.world import selectors
from context_app.world.models import WorldItem
from context_app.world.services.recording import (
    append_events,
    append_item,
    item_fields,
    new_item_id,
    validated_short,
    validated_text,
    validated_version,
)
from context_app.world.services.scopes import Scope
from nexum.core.errors import ValidationFailed
from nexum.core.ids import WORLD_IDS
from nexum.core.roles import caller_trust, trust_ceiling
from nexum.core.trust import TrustClass
from nexum.core.world.items import (
    DEFAULT_TRUST_CLASS,
    FactRecorded,
    FactState,
    decide_retract,
    decide_supersede,
    decide_verify,
    item_stream,
    render_fact,
)
from nexum.eventstore import store


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
    item_id = new_item_id(scope, "fact", idempotency_key)
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
    return append_item(scope, "fact", event, actor=actor, idempotency_key=idempotency_key)


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
    if store.replayed(stream, idempotency_key):
        return selectors.fact_get(project_id=project_id, fact_id=fact_id)
    version = validated_version(fact, expected_version)
    events = decide_verify(_fact_state(fact), note=validated_text(note, "note", required=False))
    append_events(stream, events, version, project_id, actor, idempotency_key)
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
    if store.replayed(stream, idempotency_key):
        return selectors.fact_get(project_id=project_id, fact_id=fact_id)
    version = validated_version(fact, expected_version)
    events = decide_retract(
        _fact_state(fact), reason=validated_text(reason, "reason"), ceiling=trust_ceiling(role)
    )
    append_events(stream, events, version, project_id, actor, idempotency_key)
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
    if store.replayed(new_stream, idempotency_key):
        return selectors.fact_get(project_id=project_id, fact_id=new_id)
    version = validated_version(old, expected_version)
    superseded = decide_supersede(
        _fact_state(old),
        new_fact_id=new_id,
        reason=validated_text(reason, "reason", required=False),
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
        append_events(
            item_stream("fact", str(old.id)), superseded, version, project_id, actor, idempotency_key
        )
        append_events(new_stream, [recorded], 0, project_id, actor, idempotency_key)
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
    text = validated_text(text, "text")
    source = validated_short(source, "source")
    subject = validated_short(subject, "subject")
    if not isinstance(verified, bool):
        raise ValidationFailed("verified must be true or false", field="verified")
    rendered = render_fact(text, subject=subject, source=source)
    return FactRecorded(
        **item_fields(scope, item_id, text, trust_class, rendered, subject, text),
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


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValidationFailed("observed_at needs a time zone", field="observed_at")
    try:
        return value.astimezone(UTC).isoformat()
    except (OverflowError, ValueError):
        raise ValidationFailed("observed_at is out of range", field="observed_at") from None
