"""The operator's webhook endpoints: register (the secret is in that answer only), list, read, remove, and
read a webhook's deliveries with their attempts. Every operation is an operator's: a webhook sends the
project's whole log to a URL."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nexum_web.api.auth import OperatorOnly
from nexum_web.api.strict import StrictInput, StrictQuery
from nexum_web.webhooks import services
from nexum_web.webhooks.models import SHOWN_FIELDS, Webhook, WebhookAttempt, WebhookDelivery

DELIVERIES_MAX_LIMIT = 200
OPERATOR_ONLY = OperatorOnly("configuring webhooks")


class WebhookCreateSerializer(StrictInput):
    url = serializers.CharField(
        max_length=2000, help_text="http(s); its host must be on NEXUM_SOURCE_HTTP_ALLOW"
    )
    description = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class WebhookSerializer(serializers.ModelSerializer):
    class Meta:
        model = Webhook
        fields = SHOWN_FIELDS


class WebhookCreatedSerializer(WebhookSerializer):
    secret = serializers.CharField(help_text="shown in this answer only: sign-checks each delivery")

    class Meta(WebhookSerializer.Meta):
        fields = (*WebhookSerializer.Meta.fields, "secret")


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookAttempt
        fields = ("number", "attempted_at", "status_code", "error", "duration_ms", "response_excerpt")


class DeliverySerializer(serializers.ModelSerializer):
    event_id = serializers.CharField(source="position")
    attempt_log = AttemptSerializer(many=True)

    class Meta:
        model = WebhookDelivery
        fields = (
            "id",
            "event_id",
            "position",
            "event_type",
            "state",
            "attempts",
            "requested_at",
            "delivered_at",
            "last_status",
            "last_error",
            "attempt_log",
        )


class DeliveryQuery(StrictQuery):
    cursor = serializers.IntegerField(min_value=0, default=0, help_text="the log position to page from")
    limit = serializers.IntegerField(min_value=1, max_value=DELIVERIES_MAX_LIMIT, default=50)


class WebhookListCreateView(APIView):
    """The project's webhooks; register one."""

    operator_only = {"GET": OPERATOR_ONLY, "POST": OPERATOR_ONLY}

    @extend_schema(responses=WebhookSerializer(many=True))
    def get(self, request: Request) -> Response:
        webhooks = Webhook.objects.filter(project_id=request.user.project_id)
        return Response({"results": WebhookSerializer(webhooks, many=True).data, "next_cursor": None})

    @extend_schema(request=WebhookCreateSerializer, responses={201: WebhookCreatedSerializer})
    def post(self, request: Request) -> Response:
        body = WebhookCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        registered = services.webhook_register(
            project_id=request.user.project_id, actor=request.user.actor, **body.validated_data
        )
        data = WebhookCreatedSerializer(registered.webhook).data
        return Response(data, status=status.HTTP_201_CREATED)


class WebhookDetailView(APIView):
    """One webhook; remove it (its deliveries stay on the record)."""

    operator_only = {"GET": OPERATOR_ONLY, "DELETE": OPERATOR_ONLY}

    @extend_schema(responses=WebhookSerializer)
    def get(self, request: Request, webhook_id: str) -> Response:
        webhook = services.webhook_get(project_id=request.user.project_id, webhook_id=webhook_id)
        return Response(WebhookSerializer(webhook).data)

    @extend_schema(responses=WebhookSerializer)
    def delete(self, request: Request, webhook_id: str) -> Response:
        webhook = services.webhook_remove(
            project_id=request.user.project_id, webhook_id=webhook_id, actor=request.user.actor
        )
        return Response(WebhookSerializer(webhook).data)


class WebhookDeliveryListView(APIView):
    """A webhook's deliveries in log order, each with its attempts."""

    operator_only = {"GET": OPERATOR_ONLY}
    query_serializers = {"GET": DeliveryQuery}

    @extend_schema(
        responses=inline_serializer(
            "WebhookDeliveryPage",
            {
                "results": DeliverySerializer(many=True),
                "next_cursor": serializers.CharField(allow_null=True),
            },
        ),
    )
    def get(self, request: Request, webhook_id: str) -> Response:
        webhook = services.webhook_get(project_id=request.user.project_id, webhook_id=webhook_id)
        limit = request.query["limit"]
        rows: list[Any] = list(
            webhook.deliveries.filter(position__gt=request.query["cursor"])
            .prefetch_related("attempt_log")
            .order_by("position")[: limit + 1]
        )
        page = rows[:limit]
        more = len(rows) > limit
        return Response(
            {
                "results": DeliverySerializer(page, many=True).data,
                "next_cursor": str(page[-1].position) if more else None,
            }
        )
