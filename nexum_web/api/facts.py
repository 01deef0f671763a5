"""A fact's endpoints (SPEC W1–W4): a fact with its history, and its changes (verify, retract, supersede).
Recording a fact is one of ``world``'s record endpoints.

Views validate with a serializer (unknown members are refused, naming the member), call one service and
serialize the result. A POST honours the ``Idempotency-Key`` header: a retry returns the original result.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from context_app.world import selectors
from context_app.world.services.facts import fact_retract, fact_supersede, fact_verify
from nexum.core.world.items import SHORT_MAX
from nexum_web.api.auth import CallerTrustField
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, idempotency_key
from nexum_web.api.strict import StrictInput
from nexum_web.api.world import ItemSerializer, text_field

# --- input ------------------------------------------------------------------------------------------------


class FactVerifyInput(StrictInput):
    note = text_field(required=False)
    expected_version = serializers.IntegerField(required=False, min_value=0, default=None)


class FactRetractInput(StrictInput):
    reason = text_field()
    expected_version = serializers.IntegerField(required=False, min_value=0, default=None)


class FactSupersedeInput(StrictInput):
    text = text_field()
    source = serializers.CharField(required=False, allow_blank=True, max_length=SHORT_MAX)
    subject = serializers.CharField(required=False, allow_blank=True, max_length=SHORT_MAX)
    observed_at = serializers.DateTimeField(required=False, default=None, allow_null=True)
    trust_class = CallerTrustField()
    verified = serializers.BooleanField(required=False, default=False)
    reason = text_field(required=False)
    expected_version = serializers.IntegerField(required=False, min_value=0, default=None)


# --- output -----------------------------------------------------------------------------------------------


class HistoryEntrySerializer(serializers.Serializer):
    position = serializers.IntegerField()
    version = serializers.IntegerField()
    type = serializers.CharField(source="event_type")
    data = serializers.DictField()
    actor = serializers.CharField(source="metadata.actor", default="")
    recorded_at = serializers.DateTimeField()


FACT_WITH_HISTORY = inline_serializer(
    "FactWithHistory", {"fact": ItemSerializer(), "history": HistoryEntrySerializer(many=True)}
)


# --- facts --------------------------------------------------------------------------------------------------


class FactDetailView(APIView):
    @extend_schema(summary="A fact with its history (every event of its stream)", responses=FACT_WITH_HISTORY)
    def get(self, request: Request, fact_id: str) -> Response:
        fact = selectors.fact_get(project_id=request.user.project_id, fact_id=fact_id)
        history = selectors.fact_history(fact=fact)
        return Response(
            {"fact": ItemSerializer(fact).data, "history": HistoryEntrySerializer(history, many=True).data}
        )


class FactVerifyView(APIView):
    @extend_schema(
        summary="Mark a current fact verified",
        request=FactVerifyInput,
        parameters=[IDEMPOTENCY_HEADER],
        responses=ItemSerializer,
    )
    def post(self, request: Request, fact_id: str) -> Response:
        payload = FactVerifyInput(data=request.data)
        payload.is_valid(raise_exception=True)
        fact = fact_verify(
            project_id=request.user.project_id,
            fact_id=fact_id,
            **payload.validated_data,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
        )
        return Response(ItemSerializer(fact).data)


class FactRetractView(APIView):
    error_statuses = {"POST": (403,)}  # a fact above the caller's trust ceiling (R4a)

    @extend_schema(
        summary="Retract a current fact (it stays in the history)",
        description="A fact above your token's trust ceiling (an operator's, for an agent token) is 403 "
        "naming trust_class; nothing is written.",
        request=FactRetractInput,
        parameters=[IDEMPOTENCY_HEADER],
        responses=ItemSerializer,
    )
    def post(self, request: Request, fact_id: str) -> Response:
        payload = FactRetractInput(data=request.data)
        payload.is_valid(raise_exception=True)
        fact = fact_retract(
            project_id=request.user.project_id,
            fact_id=fact_id,
            **payload.validated_data,
            role=request.user.role,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
        )
        return Response(ItemSerializer(fact).data)


class FactSupersedeView(APIView):
    @extend_schema(
        summary="Replace a current fact by a new one in the same scope; returns the new fact",
        description="A fact above your token's trust ceiling (an operator's, for an agent token) is 403 "
        "naming trust_class; nothing is written.",
        request=FactSupersedeInput,
        parameters=[IDEMPOTENCY_HEADER],
        responses={201: ItemSerializer},
    )
    def post(self, request: Request, fact_id: str) -> Response:
        payload = FactSupersedeInput(data=request.data, context={"request": request})
        payload.is_valid(raise_exception=True)
        fact = fact_supersede(
            project_id=request.user.project_id,
            fact_id=fact_id,
            **payload.validated_data,
            role=request.user.role,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
        )
        return Response(ItemSerializer(fact).data, status=status.HTTP_201_CREATED)
