"""Stored compiled context endpoints (SPEC I1, C8, C12): read a context by digest, page what it left out,
replay it, and diff two contexts. The context's JSON is written here, for these and for a compile's answer
(``compilation``).
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder
from rest_framework.views import APIView

from context_app.compilation.models import StoredContext
from context_app.compilation.selectors.contexts import context_diff, context_get
from context_app.compilation.services.replays import context_content, context_replay
from nexum.core.compilation.exclusions import REASON_CODES
from nexum.core.compilation.model import CompiledContext, Truncation
from nexum.core.errors import NotFound
from nexum_web.api.strict import StrictQuery

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
    body = json_text({**context_fields(context, compiled), "exclusions": compiled.exclusion_summary()})
    if excluded == "full":
        body = with_member(body, "excluded", compiled.excluded_json())
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


def json_text(value: Any) -> str:
    """JSON text as DRF's renderer writes it (compact, UTF-8 kept, dates and UUIDs as strings)."""
    return json.dumps(value, cls=JSONEncoder, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def with_member(object_json: str, name: str, value_json: str) -> str:
    """The JSON object ``object_json`` with one more member whose value is already JSON text."""
    separator = "" if object_json == "{}" else ","
    return f"{object_json[:-1]}{separator}{json_text(name)}:{value_json}}}"


def json_response(text: str, status_code: int = status.HTTP_200_OK) -> HttpResponse:
    return HttpResponse(text, status=status_code, content_type="application/json")


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


class ContextDetailView(APIView):
    query_serializers = {"GET": ExcludedQuery}

    @extend_schema(
        summary="A compiled context by digest",
        responses={200: COMPILED_CONTEXT},
    )
    def get(self, request: Request, digest: str) -> HttpResponse:
        excluded = excluded_view(request)
        context = context_get(project_id=request.user.project_id, digest=digest)
        return json_response(context_json(context, excluded=excluded))


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
        return json_response(f'{{"results":{records},"next_cursor":{json_text(next_cursor)}}}')


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
