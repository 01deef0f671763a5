"""The world-state endpoints (SPEC I1, W1–W4): record items on a goal or task, list and read items, and read
an artifact's stored content. A fact's changes are in ``facts``, the tool registry and the tool narrowing of
goals and tasks in ``tools``; both take their text fields, tool names and scopes from here.

Views validate with a serializer (unknown members are refused, naming the member), call one service and
serialize the result. A POST honours the ``Idempotency-Key`` header: a retry returns the original result.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable
from typing import Any, ClassVar

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from context_app.world import selectors
from context_app.world.artifacts import default_store
from context_app.world.models import WorldItem
from context_app.world.services.facts import fact_record
from context_app.world.services.records import (
    artifact_record,
    decision_record,
    failure_record,
    progress_record,
    tool_call_record,
)
from context_app.world.services.scopes import Scope, scope_resolve
from nexum.core.errors import ValidationFailed
from nexum.core.world.items import ITEM_KINDS, SHORT_MAX, TEXT_MAX, TOOL_NAME
from nexum_web.api.auth import CallerTrustField
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, idempotency_key
from nexum_web.api.pagination import LogListQuery, log_page, page_schema
from nexum_web.api.strict import StrictInput

# --- input ------------------------------------------------------------------------------------------------


def text_field(required: bool = True, max_length: int = TEXT_MAX, **kwargs: Any) -> serializers.CharField:
    """A text member: required ones may not be empty, optional ones default to "" and may be."""
    if not required:
        kwargs.setdefault("default", "")
        kwargs.setdefault("allow_blank", True)
    return serializers.CharField(required=required, max_length=max_length, **kwargs)


TOOL_NAME_PATTERN = TOOL_NAME.pattern


def tool_name_field(**kwargs: Any) -> serializers.RegexField:
    """A tool's name as the registry writes it: the pattern, whole (never trimmed into it)."""
    kwargs.setdefault("help_text", "1–64 letters, digits, '_', '-' or '.'")
    return serializers.RegexField(TOOL_NAME_PATTERN, trim_whitespace=False, **kwargs)


class FactInput(StrictInput):
    text = text_field()
    source = text_field(required=False, max_length=SHORT_MAX)
    subject = text_field(required=False, max_length=SHORT_MAX)
    observed_at = serializers.DateTimeField(required=False, default=None, allow_null=True)
    trust_class = CallerTrustField()
    verified = serializers.BooleanField(required=False, default=False)


class DecisionInput(StrictInput):
    text = text_field()
    rationale = text_field(required=False)
    trust_class = CallerTrustField()


class FailureInput(StrictInput):
    text = text_field()
    attempt = serializers.IntegerField(required=False, min_value=1, max_value=1_000_000, default=None)
    trust_class = CallerTrustField()


class ProgressInput(StrictInput):
    text = text_field()
    trust_class = CallerTrustField()


class ToolCallInput(StrictInput):
    tool = tool_name_field()
    arguments = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="the call's arguments (any JSON); only their digest is kept",
    )
    arguments_digest = serializers.RegexField(r"^[0-9a-f]{64}$", required=False, help_text="sha256, hex")
    result_summary = text_field()
    trust_class = CallerTrustField()

    exclusive = (("arguments", "arguments_digest"),)


# Base64 as RFC 4648 writes it, line-wrapped or not: whitespace (space, tab, CR, LF) anywhere is dropped.
# The empty string is the other way to send no bytes (the schema's ``oneOf`` of a blank-allowing pattern).
BASE64_WHITESPACE = "[\\t\\n\\r ]"
_BASE64_CHAR = f"[A-Za-z0-9+/]{BASE64_WHITESPACE}*"
_BASE64_PAD = f"={BASE64_WHITESPACE}*"
_BASE64_LAST = f"(?:{_BASE64_CHAR}){{2}}{_BASE64_PAD}{_BASE64_PAD}|(?:{_BASE64_CHAR}){{3}}{_BASE64_PAD}"
BASE64 = f"^{BASE64_WHITESPACE}*(?:(?:(?:{_BASE64_CHAR}){{4}})+(?:{_BASE64_LAST})?|{_BASE64_LAST})$"


class ArtifactInput(StrictInput):
    summary = text_field()
    uri = serializers.CharField(required=False, max_length=SHORT_MAX, help_text="not blank if given")
    excerpt = serializers.CharField(required=False, allow_blank=True, max_length=TEXT_MAX)
    media_type = text_field(required=False, max_length=200)
    content_base64 = serializers.RegexField(
        BASE64,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        error_messages={"invalid": "not valid base64"},
    )
    content_text = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    trust_class = CallerTrustField()

    exclusive = (("content_base64", "content_text"),)
    requires_one_of = ("uri", "content_base64", "content_text")


class ItemQuery(LogListQuery):
    goal = serializers.UUIDField(required=False)
    task = serializers.UUIDField(required=False)
    kind = serializers.ChoiceField(choices=ITEM_KINDS, required=False)
    own = serializers.BooleanField(
        required=False, default=False, help_text="with task: only the task's own items, not its goal's"
    )
    current = serializers.BooleanField(
        required=False, default=False, help_text="leave out superseded and retracted facts"
    )


# --- output -----------------------------------------------------------------------------------------------

KIND_FIELDS = {
    "fact": ("subject", "observed_at", "verified", "status", "supersedes", "superseded_by"),
    "decision": ("rationale",),
    "failure": ("attempt",),
    "artifact": ("uri", "summary", "excerpt", "media_type", "content_sha256", "content_size"),
    "progress": (),
    "tool_call": ("tool", "arguments_digest", "result_summary"),
}
_KIND_SPECIFIC = {name for names in KIND_FIELDS.values() for name in names}


class ItemSerializer(serializers.ModelSerializer):
    """An item; members of other kinds are left out (a fact has ``verified``, a decision ``rationale`` …)."""

    # Kind-specific members are present only on their kind's items: not required in the schema.
    summary = serializers.CharField(source="text", required=False, help_text="artifacts: the summary")
    result_summary = serializers.CharField(source="text", required=False, help_text="tool calls")
    content_sha256 = serializers.CharField(
        allow_null=True, required=False, help_text="artifacts: sha256 of the stored content, if any"
    )

    class Meta:
        model = WorldItem
        fields = (
            "id",
            "kind",
            "goal_id",
            "task_id",
            "text",
            "rendered",
            "token_counts",
            "line_count",
            "terms",
            "trust_class",
            "source",
            "actor",
            "position",
            "recorded_at",
            "updated_at",
            "version",
            *sorted(_KIND_SPECIFIC),
        )
        extra_kwargs = {name: {"required": False} for name in _KIND_SPECIFIC}

    def to_representation(self, instance: WorldItem) -> dict[str, Any]:
        data = super().to_representation(instance)
        keep = set(KIND_FIELDS[instance.kind])
        for name in _KIND_SPECIFIC - keep:
            data.pop(name, None)
        if "content_sha256" in data:
            data["content_sha256"] = data["content_sha256"] or None
        return data


ITEM_PAGE = page_schema("ItemPage", ItemSerializer)


# --- recording items --------------------------------------------------------------------------------------


def scope_of(request: Request, *, goal_id: str | None = None, task_id: str | None = None) -> Scope:
    """The goal or task a path names, in the caller's project."""
    return scope_resolve(project_id=request.user.project_id, goal_id=goal_id, task_id=task_id)


class _RecordItem(APIView):
    """POST: record one item of ``kind`` on the goal or task in the path."""

    kind: ClassVar[str]
    input_serializer: ClassVar[type[serializers.Serializer]]
    scope_kind: ClassVar[str]  # "goal" | "task"

    def record(self, scope: Scope, values: dict[str, Any], actor: str, key: str | None) -> WorldItem:
        raise NotImplementedError

    def post(self, request: Request, scope_id: str) -> Response:
        payload = self.input_serializer(data=request.data, context={"request": request})
        payload.is_valid(raise_exception=True)
        key = idempotency_key(request)
        scope = scope_of(request, **{f"{self.scope_kind}_id": scope_id})
        item = self.record(scope, dict(payload.validated_data), request.user.actor, key)
        return Response(ItemSerializer(item).data, status=status.HTTP_201_CREATED)


def _record_view(
    kind: str,
    scope_kind: str,
    input_serializer: type[serializers.Serializer],
    record: Callable[..., WorldItem],
) -> type[_RecordItem]:
    noun = kind.replace("_", " ")

    class View(_RecordItem):
        @extend_schema(
            summary=f"Record a {noun} on a {scope_kind}",
            request=input_serializer,
            parameters=[IDEMPOTENCY_HEADER],
            responses={201: ItemSerializer},
        )
        def post(self, request: Request, scope_id: str) -> Response:
            return super().post(request, scope_id)

    View.kind = kind
    View.scope_kind = scope_kind
    View.input_serializer = input_serializer
    View.record = staticmethod(record)  # type: ignore[assignment,method-assign]
    View.__name__ = View.__qualname__ = f"{scope_kind.title()}{kind.title().replace('_', '')}View"
    return View


def _fact(scope: Scope, values: dict[str, Any], actor: str, key: str | None) -> WorldItem:
    return fact_record(scope=scope, **values, actor=actor, idempotency_key=key)


def _decision(scope: Scope, values: dict[str, Any], actor: str, key: str | None) -> WorldItem:
    return decision_record(scope=scope, **values, actor=actor, idempotency_key=key)


def _failure(scope: Scope, values: dict[str, Any], actor: str, key: str | None) -> WorldItem:
    return failure_record(scope=scope, **values, actor=actor, idempotency_key=key)


def _progress(scope: Scope, values: dict[str, Any], actor: str, key: str | None) -> WorldItem:
    return progress_record(scope=scope, **values, actor=actor, idempotency_key=key)


def _tool_call(scope: Scope, values: dict[str, Any], actor: str, key: str | None) -> WorldItem:
    if "arguments" not in values and "arguments_digest" not in values:
        values["arguments"] = {}
    return tool_call_record(scope=scope, **values, actor=actor, idempotency_key=key)


def _artifact(scope: Scope, values: dict[str, Any], actor: str, key: str | None) -> WorldItem:
    content = None
    if "content_text" in values:
        content = values.pop("content_text").encode("utf-8")
    elif "content_base64" in values:
        encoded = re.sub(BASE64_WHITESPACE, "", values.pop("content_base64"))
        max_bytes = default_store().max_bytes
        if len(encoded) > (max_bytes + 2) // 3 * 4 + 4:  # surely over the limit once decoded
            default_store().validate_size(len(encoded) * 3 // 4, field="content_base64")
        try:
            content = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise ValidationFailed("content_base64 is not valid base64", field="content_base64") from None
    return artifact_record(scope=scope, **values, content=content, actor=actor, idempotency_key=key)


GoalFactView = _record_view("fact", "goal", FactInput, _fact)
GoalDecisionView = _record_view("decision", "goal", DecisionInput, _decision)
GoalProgressView = _record_view("progress", "goal", ProgressInput, _progress)
TaskFactView = _record_view("fact", "task", FactInput, _fact)
TaskDecisionView = _record_view("decision", "task", DecisionInput, _decision)
TaskFailureView = _record_view("failure", "task", FailureInput, _failure)
TaskProgressView = _record_view("progress", "task", ProgressInput, _progress)
TaskToolCallView = _record_view("tool_call", "task", ToolCallInput, _tool_call)


GoalArtifactView = _record_view("artifact", "goal", ArtifactInput, _artifact)
TaskArtifactView = _record_view("artifact", "task", ArtifactInput, _artifact)

# --- reading items ----------------------------------------------------------------------------------------


class ItemListView(APIView):
    query_serializers = {"GET": ItemQuery}

    @extend_schema(
        summary="Items in log order, filtered by goal, task (what it sees, or its own) and kind",
        responses=ITEM_PAGE,
    )
    def get(self, request: Request) -> Response:
        values = request.query
        goal_id = task_id = task_goal_id = None
        if "goal" in values:
            goal_id = scope_of(request, goal_id=str(values["goal"])).goal_id
        if "task" in values:
            scope = scope_of(request, task_id=str(values["task"]))
            if scope.task_id is None:  # a goal given as a task: its shared items
                goal_id = scope.goal_id
            else:
                task_id, task_goal_id = scope.task_id, scope.goal_id
        items = functools.partial(
            selectors.item_list,
            project_id=request.user.project_id,
            goal_id=goal_id,
            task_id=task_id,
            task_goal_id=task_goal_id,
            own_only=values["own"],
            kinds=[values["kind"]] if "kind" in values else None,
            current_only=values["current"],
        )
        return Response(
            log_page(
                lambda after, count: list(items(after=after)[:count]),
                limit=values["limit"],
                cursor=values.get("cursor"),
                serialize=lambda rows: ItemSerializer(rows, many=True).data,
            )
        )


class ItemDetailView(APIView):
    @extend_schema(summary="One item of any kind", responses=ItemSerializer)
    def get(self, request: Request, item_id: str) -> Response:
        item = selectors.item_get(project_id=request.user.project_id, item_id=item_id)
        return Response(ItemSerializer(item).data)


class ArtifactContentView(APIView):
    @extend_schema(
        summary="An artifact's stored content, as sent (verified against its sha256: 409 artifact_integrity"
        " when the stored bytes were changed; they are never served)",
        # application/octet-stream first, the media type a generated client reads bytes from; */* because the
        # answer's Content-Type is the artifact's own media_type.
        responses={
            (200, media_type): OpenApiResponse(
                OpenApiTypes.BINARY,
                description="the artifact's bytes, as recorded; Content-Type is its media_type "
                "(application/octet-stream when it has none). 400 no_content: it has only a uri",
            )
            for media_type in ("application/octet-stream", "*/*")
        },
    )
    def get(self, request: Request, item_id: str) -> HttpResponse:
        artifact = selectors.item_get(project_id=request.user.project_id, item_id=item_id, kind="artifact")
        if not artifact.content_sha256:
            raise ValidationFailed(
                "this artifact has no stored content, only its uri", field="item_id", code="no_content"
            )
        content = default_store().read(artifact.content_sha256)
        return HttpResponse(content, content_type=artifact.media_type or "application/octet-stream")
