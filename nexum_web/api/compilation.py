"""Compile endpoints (SPEC I1, C10): compile a task's context (synchronously or queued), poll a queued
compile, and list a task's compile history. The compiled context is read, replayed and diffed in
``contexts``.

A POST to ``/tasks/{id}/compile`` honours the ``Idempotency-Key`` header: the key names the request, so a
retry returns the first answer and writes nothing.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from context_app.compilation.models import ContextCompilation
from context_app.compilation.selectors.contexts import compile_request_get, context_get, task_compile_history
from context_app.compilation.services.compiles import context_compile
from context_app.compilation.services.request_inputs import (
    EVIDENCE_ID_MAX,
    EVIDENCE_MAX_ITEMS,
    FOCUS_MAX_CHARS,
    request_id_for_key,
)
from context_app.compilation.services.requests import context_compile_request
from nexum.core.compilation import events as compilation_events
from nexum.core.compilation.model import EVIDENCE_KINDS
from nexum.core.world.items import SHORT_MAX, TEXT_MAX
from nexum_web.api.auth import CallerTrustField
from nexum_web.api.contexts import (
    COMPILED_CONTEXT,
    COMPILED_CONTEXT_FIELDS,
    ExcludedQuery,
    context_json,
    excluded_view,
    json_response,
    json_text,
    with_member,
)
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, idempotency_key
from nexum_web.api.pagination import LogListQuery, log_page, page_schema
from nexum_web.api.positions import MIN_POSITION_PARAMETER, min_position
from nexum_web.api.strict import StrictInput
from tasks_app.selectors import task_get

# --- input ------------------------------------------------------------------------------------------------


class OverridesInput(StrictInput):
    context_tokens = serializers.IntegerField(required=False, min_value=1, max_value=10_000_000)
    tool_count = serializers.IntegerField(required=False, min_value=0, max_value=10_000)


class EvidenceInput(StrictInput):
    kind = serializers.ChoiceField(choices=EVIDENCE_KINDS, default="code")
    id = serializers.CharField(required=False, max_length=EVIDENCE_ID_MAX)
    text = serializers.CharField(max_length=TEXT_MAX, trim_whitespace=False)
    origin = serializers.CharField(required=False, allow_blank=True, max_length=SHORT_MAX)
    trust_class = CallerTrustField()


class CompileInput(StrictInput):
    model = serializers.CharField(max_length=100, help_text="a catalog word: model word, alias or tier word")
    overrides = OverridesInput(required=False, help_text="explicit budget overrides (B3)")
    evidence = serializers.ListField(child=EvidenceInput(), required=False, max_length=EVIDENCE_MAX_ITEMS)
    compaction = serializers.BooleanField(
        required=False, allow_null=True, default=None, help_text="this request's compaction choice (O6)"
    )
    focus = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=FOCUS_MAX_CHARS,
        help_text="what the agent is working on right now: ranks the facts beside the step, is shown in the "
        "current step and recorded for replay",
    )
    async_ = serializers.BooleanField(
        required=False, default=False, help_text="queue the compile and answer with a request id to poll"
    )

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        fields["async"] = fields.pop("async_")
        return fields


# --- output -----------------------------------------------------------------------------------------------


def compile_request_data(row: ContextCompilation) -> dict[str, Any]:
    return {
        "request_id": str(row.request_id),
        "status": row.status,
        "task_id": str(row.task_id),
        "model": row.model_word,
        "digest": row.digest or None,
        "position": row.position,
        "error": row.error,
        "requested_at": row.requested_at,
        "finished_at": row.finished_at,
    }


COMPILE_REQUEST_FIELDS = {
    "request_id": serializers.UUIDField(),
    "status": serializers.ChoiceField(choices=compilation_events.REQUEST_STATUSES),
    "task_id": serializers.UUIDField(),
    "model": serializers.CharField(),
    "digest": serializers.CharField(allow_null=True),
    "position": serializers.IntegerField(allow_null=True),
    "error": serializers.DictField(allow_null=True),
    "requested_at": serializers.DateTimeField(),
    "finished_at": serializers.DateTimeField(allow_null=True),
}
COMPILE_REQUEST = inline_serializer(
    "CompileRequest",
    {
        **COMPILE_REQUEST_FIELDS,
        "context": inline_serializer(
            "CompiledContext", COMPILED_CONTEXT_FIELDS, required=False, help_text="once it is done"
        ),
    },
)
COMPILE_QUEUED = inline_serializer(
    "CompileQueued",
    {**COMPILE_REQUEST_FIELDS, "url": serializers.CharField(help_text="the request to poll")},
)
COMPILE_ANSWER = inline_serializer(
    "CompileAnswer",
    {"request_id": serializers.UUIDField(), "context": COMPILED_CONTEXT},
)
# --- views ------------------------------------------------------------------------------------------------


class TaskCompileView(APIView):
    query_serializers = {"POST": ExcludedQuery}

    @extend_schema(
        summary="Compile the task's context for one model call",
        description=(
            "Synchronous by default (200 with the compiled context). With `async: true` the compile is "
            "queued and the answer is 202 with a request id to poll at `/compiles/{request_id}`."
        ),
        request=CompileInput,
        parameters=[IDEMPOTENCY_HEADER, MIN_POSITION_PARAMETER],
        responses={200: COMPILE_ANSWER, 202: COMPILE_QUEUED},
    )
    def post(self, request: Request, task_id: str) -> HttpResponse:
        excluded = excluded_view(request)
        payload = CompileInput(data=request.data, context={"request": request})
        payload.is_valid(raise_exception=True)
        values = payload.validated_data
        key = idempotency_key(request)
        project_id = request.user.project_id
        arguments = {
            "project_id": project_id,
            "task_id": task_id,
            "model_word": values["model"],
            "overrides": dict(values.get("overrides") or {}) or None,
            "extra_evidence": [dict(entry) for entry in values.get("evidence", [])],
            "compaction": values.get("compaction"),
            "focus": values.get("focus", ""),
            "request_id": request_id_for_key(project_id, key) if key else None,
            "actor": request.user.actor,
        }
        if values["async"]:
            queued = context_compile_request(**arguments)
            body = compile_request_data(queued)
            body["url"] = reverse("v1:compile-request", args=[body["request_id"]])
            return Response(body, status=status.HTTP_202_ACCEPTED)
        outcome = context_compile(**arguments, min_position=min_position(request))
        answer = json_text({"request_id": outcome.request_id})
        context = context_json(outcome.context, excluded=excluded, result=outcome.result)
        return json_response(with_member(answer, "context", context))


class CompileRequestView(APIView):
    query_serializers = {"GET": ExcludedQuery}

    @extend_schema(
        summary="A compile request: queued, done (with its context) or failed (with the error)",
        responses={200: COMPILE_REQUEST},
    )
    def get(self, request: Request, request_id: str) -> HttpResponse:
        excluded = excluded_view(request)
        project_id = request.user.project_id
        row = compile_request_get(project_id=project_id, request_id=request_id)
        body = json_text(compile_request_data(row))
        if row.status == compilation_events.REQUEST_DONE:
            context = context_get(project_id=project_id, digest=row.digest)
            body = with_member(body, "context", context_json(context, excluded=excluded))
        return json_response(body)


class CompileHistoryEntrySerializer(serializers.Serializer):
    request_id = serializers.UUIDField()
    digest = serializers.CharField(help_text="the compiled context: GET /contexts/{digest}")
    model = serializers.CharField(source="model_word")
    position = serializers.IntegerField(help_text="the log position the context was compiled at")
    compiled_position = serializers.IntegerField(
        help_text="the log position of the compile's own event (the list's cursor)"
    )
    encoding = serializers.CharField()
    prompt_tokens = serializers.IntegerField()
    tool_tokens = serializers.IntegerField()
    included_count = serializers.IntegerField()
    excluded_count = serializers.IntegerField()
    actor = serializers.CharField()
    requested_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField()


class TaskContextListView(APIView):
    query_serializers = {"GET": LogListQuery}

    @extend_schema(
        summary="The task's compile history in log order: every finished compile with its context's digest",
        responses={200: page_schema("CompileHistoryPage", CompileHistoryEntrySerializer)},
    )
    def get(self, request: Request, task_id: str) -> Response:
        project_id = request.user.project_id
        task = task_get(project_id=project_id, task_id=task_id)
        return Response(
            log_page(
                lambda after, count: list(
                    task_compile_history(project_id=project_id, task_id=task.id, after=after)[:count]
                ),
                limit=request.query["limit"],
                cursor=request.query.get("cursor"),
                serialize=lambda rows: CompileHistoryEntrySerializer(rows, many=True).data,
                position=lambda row: row.compiled_position,
            )
        )
