"""The tool endpoints (SPEC W1–W4): the project's tool registry (operators change it) and the tool
narrowing and pinning of goals and tasks.

Views validate with a serializer (unknown members are refused, naming the member), call one service and
serialize the result. A POST or PUT honours the ``Idempotency-Key`` header: a retry returns the original
result.
"""

from __future__ import annotations

from typing import ClassVar

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from context_app.world import selectors
from context_app.world.models import Tool
from context_app.world.services.scopes import Scope
from context_app.world.services.tools import tool_define, tool_remove, tool_scope_set
from nexum_web.api.auth import OperatorOnly
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, idempotency_key
from nexum_web.api.pagination import ListQuery, keyset_page, page_schema
from nexum_web.api.strict import StrictInput, StrictQuery
from nexum_web.api.world import TOOL_NAME_PATTERN, scope_of, text_field, tool_name_field

# --- input ------------------------------------------------------------------------------------------------

TOOL_NAME_IN_PATH = OpenApiParameter("name", str, OpenApiParameter.PATH, pattern=TOOL_NAME_PATTERN)


class ToolInput(StrictInput):
    description = text_field(required=False)
    schema = serializers.DictField(required=False, default=dict, help_text="the tool's JSON schema")
    pinned = serializers.BooleanField(required=False, default=False)
    score = serializers.FloatField(required=False, allow_null=True, default=None)
    expected_version = serializers.IntegerField(required=False, min_value=0, default=None)


class ToolCreateInput(ToolInput):
    name = tool_name_field()


class ToolScopeInput(StrictInput):
    allowed = serializers.ListField(
        child=tool_name_field(help_text=None),
        allow_null=True,
        required=False,
        default=None,
        max_length=1000,
    )
    pinned = serializers.ListField(
        child=tool_name_field(help_text=None), required=False, default=list, max_length=1000
    )
    expected_version = serializers.IntegerField(required=False, min_value=0, default=None)


# --- output -----------------------------------------------------------------------------------------------


class ToolSerializer(serializers.ModelSerializer):
    class Meta:
        model = Tool
        fields = (
            "name",
            "description",
            "schema",
            "pinned",
            "score",
            "token_counts",
            "version",
            "created_at",
            "updated_at",
        )


SCOPE_TOOLS = inline_serializer(
    "ScopeTools",
    {
        "goal_id": serializers.UUIDField(),
        "task_id": serializers.UUIDField(allow_null=True),
        "allowed": serializers.ListField(child=serializers.CharField(), allow_null=True),
        "pinned": serializers.ListField(child=serializers.CharField()),
        "version": serializers.IntegerField(),
        "tools": ToolSerializer(many=True),
    },
)


# --- tools --------------------------------------------------------------------------------------------------


TOOL_REGISTRY = "changing the project's tool registry"
TOOL_SCOPE = "narrowing or pinning the tools of a goal or task"


class ToolListView(APIView):
    operator_only = {"POST": OperatorOnly(TOOL_REGISTRY)}
    query_serializers = {"GET": ListQuery}

    @extend_schema(
        summary="The project's tool registry, by name", responses=page_schema("ToolPage", ToolSerializer)
    )
    def get(self, request: Request) -> Response:
        return Response(
            keyset_page(
                selectors.tool_list(project_id=request.user.project_id),
                limit=request.query["limit"],
                cursor=request.query.get("cursor"),
                serialize=lambda tools: ToolSerializer(tools, many=True).data,
            )
        )

    @extend_schema(
        summary="Register a tool (409 if the name is taken)",
        request=ToolCreateInput,
        parameters=[IDEMPOTENCY_HEADER],
        responses={201: ToolSerializer},
    )
    def post(self, request: Request) -> Response:
        payload = ToolCreateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        tool = tool_define(
            project_id=request.user.project_id,
            **payload.validated_data,
            create_only=True,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
        )
        return Response(ToolSerializer(tool).data, status=status.HTTP_201_CREATED)


class ToolDeleteQuery(StrictQuery):
    expected_version = serializers.IntegerField(required=False, min_value=0, max_value=2**31 - 1)


class ToolDetailView(APIView):
    operator_only = {"PUT": OperatorOnly(TOOL_REGISTRY), "DELETE": OperatorOnly(TOOL_REGISTRY)}
    query_serializers = {"DELETE": ToolDeleteQuery}

    @extend_schema(summary="One tool", parameters=[TOOL_NAME_IN_PATH], responses=ToolSerializer)
    def get(self, request: Request, name: str) -> Response:
        return Response(
            ToolSerializer(selectors.tool_get(project_id=request.user.project_id, name=name)).data
        )

    @extend_schema(
        summary="Register or redefine a tool (the whole definition)",
        request=ToolInput,
        parameters=[TOOL_NAME_IN_PATH, IDEMPOTENCY_HEADER],
        responses=ToolSerializer,
    )
    def put(self, request: Request, name: str) -> Response:
        payload = ToolInput(data=request.data)
        payload.is_valid(raise_exception=True)
        tool = tool_define(
            project_id=request.user.project_id,
            name=name,
            **payload.validated_data,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
        )
        return Response(ToolSerializer(tool).data)

    @extend_schema(
        summary="Remove a tool from the registry", parameters=[TOOL_NAME_IN_PATH], responses={204: None}
    )
    def delete(self, request: Request, name: str) -> Response:
        tool_remove(
            project_id=request.user.project_id,
            name=name,
            expected_version=request.query.get("expected_version"),
            actor=request.user.actor,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class _ScopeToolsView(APIView):
    scope_kind: ClassVar[str]
    operator_only = {"PUT": OperatorOnly(TOOL_SCOPE)}

    def _response(self, scope: Scope) -> Response:
        scope_row = selectors.tool_scope_get(scope_id=scope.scope_id)
        tools = selectors.tools_for_scope(
            project_id=scope.project_id, goal_id=scope.goal_id, task_id=scope.task_id
        )
        return Response(
            {
                "goal_id": scope.goal_id,
                "task_id": scope.task_id,
                "allowed": scope_row.allowed if scope_row else None,
                "pinned": scope_row.pinned if scope_row else [],
                "version": scope_row.version if scope_row else 0,
                "tools": ToolSerializer(tools, many=True).data,
            }
        )

    def get(self, request: Request, scope_id: str) -> Response:
        return self._response(scope_of(request, **{f"{self.scope_kind}_id": scope_id}))

    def put(self, request: Request, scope_id: str) -> Response:
        payload = ToolScopeInput(data=request.data)
        payload.is_valid(raise_exception=True)
        key = idempotency_key(request)
        scope = scope_of(request, **{f"{self.scope_kind}_id": scope_id})
        tool_scope_set(scope=scope, **payload.validated_data, actor=request.user.actor, idempotency_key=key)
        return self._response(scope)


class GoalToolsView(_ScopeToolsView):
    scope_kind = "goal"

    @extend_schema(
        summary="The tools a goal's tasks may use, and the goal's narrowing", responses=SCOPE_TOOLS
    )
    def get(self, request: Request, scope_id: str) -> Response:
        return super().get(request, scope_id)

    @extend_schema(
        summary="Narrow (allowed; null for all) and pin the goal's tools",
        request=ToolScopeInput,
        parameters=[IDEMPOTENCY_HEADER],
        responses=SCOPE_TOOLS,
    )
    def put(self, request: Request, scope_id: str) -> Response:
        return super().put(request, scope_id)


class TaskToolsView(_ScopeToolsView):
    scope_kind = "task"

    @extend_schema(
        summary="The tools a task may use (registry, goal, then task narrowing)", responses=SCOPE_TOOLS
    )
    def get(self, request: Request, scope_id: str) -> Response:
        return super().get(request, scope_id)

    @extend_schema(
        summary="Narrow (allowed; null for all) and pin the task's tools",
        request=ToolScopeInput,
        parameters=[IDEMPOTENCY_HEADER],
        responses=SCOPE_TOOLS,
    )
    def put(self, request: Request, scope_id: str) -> Response:
        return super().put(request, scope_id)
