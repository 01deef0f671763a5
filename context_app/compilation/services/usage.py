"""The usage ledger (issue 28): what the provider reported for one model call made with a stored context,
recorded as ``ContextUsageReported``.
"""

from __future__ import annotations

import uuid

from context_app.catalog import selectors as catalog_selectors
from context_app.compilation.models import ContextUsage
from context_app.compilation.selectors.contexts import context_get
from nexum.core.catalog.usage import (
    ContextUsageReported,
    usage_stream,
    validate_cost,
    validate_name,
    validate_token_count,
)
from nexum.core.errors import ValidationFailed
from nexum.core.ids import COMPILATION_IDS
from nexum.eventstore import store


def context_usage_report(
    *,
    project_id: str,
    digest: str,
    prompt_tokens: object,
    completion_tokens: object,
    provider: object,
    model: object,
    cost: object = None,
    actor: str,
    idempotency_key: str | None = None,
) -> ContextUsage:
    """Record what the provider reported for one model call made with the project's context ``digest``
    (``ContextUsageReported``: the numbers, ids and digest only). An unknown or other project's digest is
    ``NotFound``; a count below 0, a blank name, a negative cost are ``ValidationFailed`` naming the member;
    nothing is written then. A retry with the same ``idempotency_key`` writes nothing and returns the first
    report."""
    values = {
        "prompt_tokens": validate_token_count(prompt_tokens, "prompt_tokens"),
        "completion_tokens": validate_token_count(completion_tokens, "completion_tokens"),
        "provider": validate_name(provider, "provider"),
        "model": validate_name(model, "model"),
        "cost": validate_cost(cost),
    }
    context = context_get(project_id=project_id, digest=digest)
    usage_id = (
        str(uuid.uuid4())
        if idempotency_key is None
        else str(uuid.uuid5(COMPILATION_IDS, f"{project_id}/usage/{context.digest}/{idempotency_key}"))
    )
    event = ContextUsageReported(
        usage_id=usage_id,
        digest=context.digest,
        task_id=str(context.task_id),
        goal_id=str(context.goal_id),
        model_word=context.model_word,
        card_word=_card_word(project_id, context.model_word),
        nexum_tokens=context.total_tokens,
        **values,
    )
    store.append(
        stream_id=usage_stream(usage_id),
        events=[event],
        expected_version=0,
        idempotency_key=idempotency_key,
        actor=actor,
        project_id=project_id,
    )
    return ContextUsage.objects.get(usage_id=usage_id)


def _card_word(project_id: str, word: str) -> str:
    """The card ``word`` resolves to in the catalog now; the word itself when the catalog has dropped it."""
    try:
        return catalog_selectors.catalog_for(project_id).resolve(word).word
    except ValidationFailed:
        return word
