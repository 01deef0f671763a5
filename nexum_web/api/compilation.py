"""Compile endpoints (SPEC I1, C8, C10, C12): compile a task's context (synchronously or queued), poll a
queued compile, read a stored context, replay it, and diff two contexts.

A POST to ``/tasks/{id}/compile`` honours the ``Idempotency-Key`` header: the key names the request, so a
retry returns the first answer and writes nothing.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder
from rest_framework.views import APIView

from context_app.compilation import retention
from context_app.compilation.models import ContextCompilation, StoredContext
from context_app.compilation.selectors.contexts import (
    compile_request_get,
    context_diff,
    context_get,
    task_compile_history,
)
from context_app.compilation.services.compile_settings import relevance_floor
from context_app.compilation.services.compiles import context_compile
from context_app.compilation.services.replays import context_content, context_replay
from context_app.compilation.services.request_inputs import (
    EVIDENCE_ID_MAX,
    EVIDENCE_MAX_ITEMS,
    FOCUS_MAX_CHARS,
    request_id_for_key,
)
from context_app.compilation.services.requests import context_compile_request
from nexum.core.compilation import events as compilation_events
from nexum.core.compilation.exclusions import REASON_CODES
from nexum.core.compilation.model import EVIDENCE_KINDS, CompiledContext, Truncation
from nexum.core.compilation.retention import POLICY_FIELDS, RETENTION_DAYS_MAX
from nexum.core.errors import NotFound
from nexum.core.world.items import SHORT_MAX, TEXT_MAX
from nexum_web.api.auth import CallerTrustField, OperatorOnly
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, idempotency_key
from nexum_web.api.pagination import LogListQuery, log_page, page_schema
from nexum_web.api.positions import MIN_POSITION_PARAMETER, min_position
from nexum_web.api.strict import StrictInput, StrictQuery
from tasks_app.selectors import project_get, task_get
from tasks_app.services.projects import project_relevance_floor_set, project_retention, project_retention_set

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


def context_fields(context: StoredContext, compiled: CompiledContext) -> dict[str, Any]:
    """A compiled context as the API shows it, but for ``excluded`` (``context_json`` adds it); its text is
    ``compiled``'s (recompiled for a context retention pruned)."""
    return {
        "digest": context.digest,
        "task_id": str(context.task_id),
        "goal_id": str(context.goal_id),
        "model": context.model_word,
        "encoding": context.encoding,
        "position": context.position,
        "budget": context.budget,
        "prompt_block": compiled.prompt_block,
        "tools": list(context.tools),
        "included": [{"kind": kind, "id": item_id} for kind, item_id in context.included],
        "truncated": [Truncation(*record)._asdict() for record in context.truncated],
        "section_tokens": dict(context.section_tokens),
        "prompt_tokens": context.prompt_tokens,
        "tool_tokens": context.tool_tokens,
        "total_tokens": context.total_tokens,
        "bundle_digest": context.bundle_digest or None,
        "evidence_digest": context.evidence_digest or None,
        "compiler_version": context.compiler_version,
        "embedder": context.embedder or None,
        "pruned_at": context.pruned_at,
    }


EXCLUDED_VIEWS = ("summary", "full")
EXCLUDED_LIMIT = 50
EXCLUDED_MAX_LIMIT = 500


def context_json(context: StoredContext, *, excluded: str, result: CompiledContext | None = None) -> str:
    """The context as JSON text with ``exclusions`` (the summary: counts per reason and the runs) and, when
    ``excluded`` is ``full``, ``excluded``: every record, written by the compiler from its exclusion runs
    (``CompiledContext.excluded_json``), so a large world's tens of thousands of records cost no object
    each. ``result`` is the compiler's result for this context when the caller has it (no stored runs are
    parsed then); without it, a context retention pruned is recompiled (``context_content``)."""
    compiled = result if result is not None else context_content(context)
    body = _json({**context_fields(context, compiled), "exclusions": compiled.exclusion_summary()})
    if excluded == "full":
        body = _with_member(body, "excluded", compiled.excluded_json())
    return body


class ExcludedQuery(StrictQuery):
    """How much of what a context left out the answer carries."""

    excluded = serializers.ChoiceField(
        choices=EXCLUDED_VIEWS,
        default="summary",
        help_text="`summary` (default): counts per reason and the runs; `full`: also every excluded record",
    )


class ExcludedPageQuery(StrictQuery):
    """A page of a stored context's excluded records: the cursor is the index of the page's first record
    (the list's own order never changes for a stored context)."""

    limit = serializers.IntegerField(min_value=1, max_value=EXCLUDED_MAX_LIMIT, default=EXCLUDED_LIMIT)
    cursor = serializers.IntegerField(
        min_value=0, max_value=10**12, default=0, help_text="the next_cursor of the previous page"
    )


def excluded_view(request: Request) -> str:
    """The declared ``excluded`` query parameter: ``summary`` or ``full``."""
    return request.query["excluded"]


def _page_bounds(request: Request, total: int) -> tuple[int, int]:
    """``cursor`` and ``limit`` of a page of the excluded list; a cursor past the list is not one it gave."""
    cursor, limit = request.query["cursor"], request.query["limit"]
    if cursor > total:
        raise NotFound("no such page: not a cursor this list gave", field="cursor")
    return cursor, limit


def _json(value: Any) -> str:
    """JSON text as DRF's renderer writes it (compact, UTF-8 kept, dates and UUIDs as strings)."""
    return json.dumps(value, cls=JSONEncoder, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _with_member(object_json: str, name: str, value_json: str) -> str:
    """The JSON object ``object_json`` with one more member whose value is already JSON text."""
    separator = "" if object_json == "{}" else ","
    return f"{object_json[:-1]}{separator}{_json(name)}:{value_json}}}"


def _json_response(text: str, status_code: int = status.HTTP_200_OK) -> HttpResponse:
    return HttpResponse(text, status=status_code, content_type="application/json")


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


EXCLUDED_FIELDS = {
    "kind": serializers.CharField(),
    "id": serializers.CharField(),
    "tokens_needed": serializers.IntegerField(),
    "tokens_left": serializers.IntegerField(),
    "reason": serializers.CharField(),
}
EXCLUDED = inline_serializer("ExcludedItem", EXCLUDED_FIELDS, many=True)
EXCLUSIONS = inline_serializer(
    "ExclusionSummary",
    {
        "count": serializers.IntegerField(help_text="items and tools left out"),
        "by_reason": serializers.DictField(
            child=serializers.IntegerField(), help_text=f"count per reason code: {', '.join(REASON_CODES)}"
        ),
        "runs": inline_serializer(
            "ExclusionRunSummary",
            {
                "kind": serializers.CharField(),
                "reason": serializers.CharField(
                    allow_null=True, help_text="null: each needed more tokens than were left"
                ),
                "tokens_left": serializers.IntegerField(),
                "count": serializers.IntegerField(),
            },
            many=True,
        ),
    },
)
EXCLUDED_PAGE = inline_serializer(
    "ExcludedPage",
    {
        "results": EXCLUDED,
        "next_cursor": serializers.CharField(
            allow_null=True, help_text="pass as ?cursor= for the next page; null on the last page"
        ),
    },
)
COMPILED_CONTEXT_FIELDS = {
    "digest": serializers.CharField(help_text="sha256 of the context's canonical form"),
    "task_id": serializers.UUIDField(),
    "goal_id": serializers.UUIDField(),
    "model": serializers.CharField(),
    "encoding": serializers.CharField(),
    "position": serializers.IntegerField(help_text="the log position the context was compiled at"),
    "budget": serializers.DictField(),
    "prompt_block": serializers.CharField(),
    "tools": serializers.ListField(child=serializers.CharField()),
    "included": serializers.ListField(child=serializers.DictField()),
    "exclusions": EXCLUSIONS,
    "excluded": inline_serializer(
        "ExcludedItem",
        EXCLUDED_FIELDS,
        many=True,
        required=False,
        help_text="every excluded record, only with ?excluded=full",
    ),
    "truncated": serializers.ListField(child=serializers.DictField()),
    "section_tokens": serializers.DictField(),
    "prompt_tokens": serializers.IntegerField(),
    "tool_tokens": serializers.IntegerField(),
    "total_tokens": serializers.IntegerField(),
    "bundle_digest": serializers.CharField(allow_null=True),
    "evidence_digest": serializers.CharField(allow_null=True),
    "compiler_version": serializers.IntegerField(),
    "embedder": serializers.CharField(
        allow_null=True,
        help_text="name@version of the embedder the compile ranked by (NEXUM_EMBEDDER); null: by words alone",
    ),
    "pruned_at": serializers.DateTimeField(
        allow_null=True,
        help_text="when retention pruned the stored content (its text here is recompiled at the position and "
        "verified against the digest); null: stored",
    ),
}
COMPILED_CONTEXT = inline_serializer("CompiledContext", COMPILED_CONTEXT_FIELDS)
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
REPLAY = inline_serializer(
    "ContextReplay",
    {
        "digest": serializers.CharField(),
        "replayed_digest": serializers.CharField(),
        "matches": serializers.BooleanField(),
        "position": serializers.IntegerField(),
    },
)
DIFF_ENTRY = inline_serializer(
    "ContextDiffEntry",
    {
        "kind": serializers.CharField(),
        "id": serializers.CharField(),
        "reason": serializers.CharField(allow_null=True, help_text="why the other context left it out"),
    },
    many=True,
)
DIFF = inline_serializer(
    "ContextDiff",
    {
        "from": serializers.CharField(),
        "to": serializers.CharField(),
        "entered": DIFF_ENTRY,
        "left": DIFF_ENTRY,
    },
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
        answer = _json({"request_id": outcome.request_id})
        context = context_json(outcome.context, excluded=excluded, result=outcome.result)
        return _json_response(_with_member(answer, "context", context))


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
        body = _json(compile_request_data(row))
        if row.status == compilation_events.REQUEST_DONE:
            context = context_get(project_id=project_id, digest=row.digest)
            body = _with_member(body, "context", context_json(context, excluded=excluded))
        return _json_response(body)


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


class ContextDetailView(APIView):
    query_serializers = {"GET": ExcludedQuery}

    @extend_schema(
        summary="A compiled context by digest",
        responses={200: COMPILED_CONTEXT},
    )
    def get(self, request: Request, digest: str) -> HttpResponse:
        excluded = excluded_view(request)
        context = context_get(project_id=request.user.project_id, digest=digest)
        return _json_response(context_json(context, excluded=excluded))


class ContextExcludedView(APIView):
    query_serializers = {"GET": ExcludedPageQuery}

    @extend_schema(
        summary="Every item and tool a compiled context left out, in order, a page at a time",
        responses={200: EXCLUDED_PAGE},
    )
    def get(self, request: Request, digest: str) -> HttpResponse:
        context = context_get(project_id=request.user.project_id, digest=digest)
        start, limit = _page_bounds(request, context.excluded_count)
        stop = start + limit
        records = context_content(context).excluded_json(start, stop)
        next_cursor = str(stop) if stop < context.excluded_count else None
        return _json_response(f'{{"results":{records},"next_cursor":{_json(next_cursor)}}}')


class ContextReplayView(APIView):
    def _replay(self, request: Request, digest: str) -> Response:
        outcome = context_replay(project_id=request.user.project_id, digest=digest)
        return Response(
            {
                "digest": outcome.digest,
                "replayed_digest": outcome.replayed_digest,
                "matches": outcome.matches,
                "position": outcome.position,
            }
        )

    @extend_schema(
        summary="Recompile at the stored position and compare digests (writes nothing)",
        request=None,
        responses={200: REPLAY},
    )
    def post(self, request: Request, digest: str) -> Response:
        return self._replay(request, digest)

    @extend_schema(summary="Same as POST", responses={200: REPLAY})
    def get(self, request: Request, digest: str) -> Response:
        return self._replay(request, digest)


class ContextDiffView(APIView):
    @extend_schema(
        summary="Which items and tools entered and left between two compiled contexts, and why",
        parameters=[
            OpenApiParameter("digest", str, OpenApiParameter.PATH, description="the earlier context"),
            OpenApiParameter("other", str, OpenApiParameter.PATH, description="the later context"),
        ],
        responses={200: DIFF},
    )
    def get(self, request: Request, digest: str, other: str) -> Response:
        project_id = request.user.project_id
        before = context_get(project_id=project_id, digest=digest)
        after = context_get(project_id=project_id, digest=other)
        diff = context_diff(before_result=context_content(before), after_result=context_content(after))
        return Response(
            {
                "from": before.digest,
                "to": after.digest,
                "entered": [entry._asdict() for entry in diff.entered],
                "left": [entry._asdict() for entry in diff.left],
            }
        )


# --- the project's compile settings -----------------------------------------------------------------------


class CompileSettingsInput(StrictInput):
    relevance_floor = serializers.FloatField(
        allow_null=True,
        min_value=0.0,
        max_value=1.0,
        help_text="a number from 0 to 1 (0: no floor); null: the service's NEXUM_RELEVANCE_FLOOR",
    )


COMPILE_SETTINGS = inline_serializer(
    "CompileSettings",
    {
        "relevance_floor": serializers.FloatField(
            allow_null=True, help_text="the project's own floor; null: none set"
        ),
        "effective_relevance_floor": serializers.FloatField(
            help_text="the floor the project's compiles apply now (its own, else NEXUM_RELEVANCE_FLOOR)"
        ),
        "version": serializers.IntegerField(help_text="the project's stream version"),
    },
)


class ProjectCompileSettingsView(APIView):
    """The project's compile settings: its relevance floor (issue 24 item 3). ``PUT`` (operator) sets it, as
    an event; each compile records the floor it applied."""

    operator_only = {"PUT": OperatorOnly("setting the project's relevance floor")}

    @extend_schema(responses=COMPILE_SETTINGS)
    def get(self, request: Request) -> Response:
        return self._answer(request.user.project_id)

    @extend_schema(request=CompileSettingsInput, responses=COMPILE_SETTINGS)
    def put(self, request: Request) -> Response:
        payload = CompileSettingsInput(data=request.data, context={"request": request})
        payload.is_valid(raise_exception=True)
        project_relevance_floor_set(
            project_id=request.user.project_id,
            relevance_floor=request.data.get("relevance_floor"),
            actor=request.user.actor,
        )
        return self._answer(request.user.project_id)

    def _answer(self, project_id: str) -> Response:
        project = project_get(project_id=project_id)
        return Response(
            {
                "relevance_floor": project.relevance_floor,
                "effective_relevance_floor": relevance_floor(project_id),
                "version": project.version,
            }
        )


# --- the project's retention policy -----------------------------------------------------------------------


def _days_input(what: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        allow_null=True,
        min_value=1,
        max_value=RETENTION_DAYS_MAX,
        help_text=f"days to keep {what} (1 to {RETENTION_DAYS_MAX}); null: the service's default",
    )


class RetentionInput(StrictInput):
    context_days = _days_input("stored compiled contexts")
    bundle_days = _days_input("bundles")
    check_output_days = _days_input("check output")


def _days_output(setting: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        allow_null=True, help_text=f"null: {setting} (unset there: kept for ever)"
    )


RETENTION = inline_serializer(
    "Retention",
    {
        "policy": inline_serializer(
            "RetentionPolicy",
            {
                "context_days": _days_output("NEXUM_RETENTION_CONTEXT_DAYS"),
                "bundle_days": _days_output("NEXUM_RETENTION_BUNDLE_DAYS"),
                "check_output_days": _days_output("NEXUM_RETENTION_CHECK_OUTPUT_DAYS"),
            },
            help_text="the project's own policy",
        ),
        "effective": inline_serializer(
            "RetentionEffective",
            {
                "contexts": serializers.IntegerField(allow_null=True),
                "bundles": serializers.IntegerField(allow_null=True),
                "check_output": serializers.IntegerField(allow_null=True),
            },
            help_text="days each kind is kept now (its own, else the service's); null: for ever",
        ),
        "pruned": inline_serializer(
            "RetentionPruned",
            {
                "contexts": serializers.IntegerField(),
                "bundles": serializers.IntegerField(),
                "check_output": serializers.IntegerField(),
                "bytes_freed": serializers.IntegerField(),
            },
            help_text="what retention has pruned in the project so far",
        ),
        "version": serializers.IntegerField(help_text="the project's stream version"),
    },
)


class ProjectRetentionView(APIView):
    """The project's retention policy (issue 27 item 4): days to keep stored compiled contexts, bundles and
    check output before they are pruned to their digests. ``PUT`` (operator) replaces it, as an event."""

    operator_only = {"PUT": OperatorOnly("setting the project's retention policy")}

    @extend_schema(responses=RETENTION)
    def get(self, request: Request) -> Response:
        return self._answer(request.user.project_id)

    @extend_schema(request=RetentionInput, responses=RETENTION)
    def put(self, request: Request) -> Response:
        payload = RetentionInput(data=request.data, context={"request": request})
        payload.is_valid(raise_exception=True)
        project_retention_set(
            project_id=request.user.project_id,
            policy={field: request.data.get(field) for field in POLICY_FIELDS.values()},
            actor=request.user.actor,
        )
        return self._answer(request.user.project_id)

    def _answer(self, project_id: str) -> Response:
        project = project_get(project_id=project_id)
        pruned = retention.pruned_totals(project_id=project_id)
        return Response(
            {
                "policy": project_retention(project),
                "effective": retention.effective_policy(project),
                "pruned": pruned,
                "version": project.version,
            }
        )
