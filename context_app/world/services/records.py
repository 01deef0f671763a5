"""The other items of the world state: decisions, failures, progress, tool calls and artifacts (an
artifact's content goes to the artifact store, its event carries the digest)."""

from __future__ import annotations

from typing import Any

from context_app.world.artifacts import default_store
from context_app.world.models import WorldItem
from context_app.world.services.recording import (
    append_item,
    item_fields,
    new_item_id,
    validated_short,
    validated_text,
)
from context_app.world.services.scopes import Scope
from nexum.core.digests import digest_of
from nexum.core.errors import ValidationFailed
from nexum.core.world.items import (
    DEFAULT_TRUST_CLASS,
    SHA256_HEX,
    ArtifactRecorded,
    DecisionRecorded,
    FailureRecorded,
    ProgressRecorded,
    ToolCallRecorded,
    render_artifact,
    render_decision,
    render_failure,
    render_progress,
    render_tool_call,
    validate_tool_name,
)


def decision_record(
    *,
    scope: Scope,
    text: str,
    rationale: str = "",
    trust_class: str = DEFAULT_TRUST_CLASS,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    text = validated_text(text, "text")
    rationale = validated_text(rationale, "rationale", required=False)
    rendered = render_decision(text, rationale=rationale)
    event = DecisionRecorded(
        **item_fields(
            scope, new_item_id(scope, "decision", idempotency_key), text, trust_class, rendered, text
        ),
        rationale=rationale,
    )
    return append_item(scope, "decision", event, actor=actor, idempotency_key=idempotency_key)


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
    text = validated_text(text, "text")
    if attempt is None:
        attempt = scope.attempt
    if attempt is not None and (not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1):
        raise ValidationFailed("attempt must be a positive integer", field="attempt")
    rendered = render_failure(text, attempt=attempt)
    event = FailureRecorded(
        **item_fields(
            scope, new_item_id(scope, "failure", idempotency_key), text, trust_class, rendered, text
        ),
        attempt=attempt,
    )
    return append_item(scope, "failure", event, actor=actor, idempotency_key=idempotency_key)


def progress_record(
    *,
    scope: Scope,
    text: str,
    trust_class: str = DEFAULT_TRUST_CLASS,
    actor: str,
    idempotency_key: str | None = None,
) -> WorldItem:
    text = validated_text(text, "text")
    rendered = render_progress(text)
    event = ProgressRecorded(
        **item_fields(
            scope, new_item_id(scope, "progress", idempotency_key), text, trust_class, rendered, text
        )
    )
    return append_item(scope, "progress", event, actor=actor, idempotency_key=idempotency_key)


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
    validate_tool_name(tool, field_name="tool")
    summary = validated_text(result_summary, "result_summary")
    if arguments_digest is None:
        try:
            arguments_digest = digest_of(arguments)
        except (TypeError, ValueError) as error:
            raise ValidationFailed(f"arguments must be JSON: {error}", field="arguments") from None
    elif not isinstance(arguments_digest, str) or not SHA256_HEX.match(arguments_digest):
        raise ValidationFailed("arguments_digest is 64 lowercase hex digits", field="arguments_digest")
    rendered = render_tool_call(tool=tool, arguments_digest=arguments_digest, result_summary=summary)
    item_id = new_item_id(scope, "tool_call", idempotency_key)
    event = ToolCallRecorded(
        **item_fields(scope, item_id, summary, trust_class, rendered, f"{tool} {summary}"),
        tool=tool,
        arguments_digest=arguments_digest,
    )
    return append_item(scope, "tool_call", event, actor=actor, idempotency_key=idempotency_key)


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
    summary = validated_text(summary, "summary")
    uri = validated_short(uri, "uri")
    media_type = validated_short(media_type, "media_type")
    if content is None and not uri:
        raise ValidationFailed("an artifact needs a uri or content", field="uri")
    artifact_store = default_store()
    if content is not None:
        artifact_store.validate_size(len(content))
        if excerpt is None:
            excerpt = _text_excerpt(content)
    excerpt = validated_text(excerpt or "", "excerpt", required=False)
    if content is not None and not media_type:
        media_type = "text/plain" if _decodes(content) else "application/octet-stream"
    item_id = new_item_id(scope, "artifact", idempotency_key)
    # Check the whole event before the content is written: a refused request stores nothing.
    rendered = render_artifact(uri=uri, summary=summary, excerpt=excerpt, media_type=media_type)
    common = item_fields(scope, item_id, summary, trust_class, rendered, summary)
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
    return append_item(scope, "artifact", event, actor=actor, idempotency_key=idempotency_key)


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
