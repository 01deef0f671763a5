"""The operator's webhook endpoints: register (the secret is in that answer only), list, read, remove, and
read a webhook's deliveries with their attempts. Every operation is an operator's: a webhook sends the
project's whole log to a URL."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nexum.adapters.source_policy import HTTP_URL, HTTP_URL_RULE
from nexum_web.api.auth import OperatorOnly
from nexum_web.api.pagination import ListQuery, LogListQuery, keyset_page, log_page, page_schema
from nexum_web.api.strict import StrictInput
from nexum_web.webhooks import services
from nexum_web.webhooks.models import SHOWN_FIELDS, Webhook, WebhookAttempt, WebhookDelivery

OPERATOR_ONLY = OperatorOnly("configuring webhooks")


class WebhookCreateSerializer(StrictInput):
    url = serializers.RegexField(
        HTTP_URL,
        max_length=2000,
        trim_whitespace=False,
        error_messages={"invalid": f"must be {HTTP_URL_RULE}"},
        help_text=f"{HTTP_URL_RULE}; its host must be on NEXUM_SOURCE_HTTP_ALLOW",
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


class WebhookListCreateView(APIView):
    """The project's webhooks; register one."""

    operator_only = {"GET": OPERATOR_ONLY, "POST": OPERATOR_ONLY}
    query_serializers = {"GET": ListQuery}
    error_statuses = {"POST": (422,)}

    @extend_schema(responses=page_schema("WebhookPage", WebhookSerializer))
    def get(self, request: Request) -> Response:
        return Response(
            keyset_page(
                Webhook.objects.filter(project_id=request.user.project_id).order_by("-created_at", "id"),
                limit=request.query["limit"],
                cursor=request.query.get("cursor"),
                serialize=lambda rows: WebhookSerializer(rows, many=True).data,
            )
        )

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

    @extend_schema(responses={200: WebhookSerializer})
    def delete(self, request: Request, webhook_id: str) -> Response:
        webhook = services.webhook_remove(
            project_id=request.user.project_id, webhook_id=webhook_id, actor=request.user.actor
        )
        return Response(WebhookSerializer(webhook).data)


class WebhookDeliveryListView(APIView):
    """A webhook's deliveries in log order, each with its attempts."""

    operator_only = {"GET": OPERATOR_ONLY}
    query_serializers = {"GET": LogListQuery}

    @extend_schema(responses=page_schema("WebhookDeliveryPage", DeliverySerializer))
    def get(self, request: Request, webhook_id: str) -> Response:
        webhook = services.webhook_get(project_id=request.user.project_id, webhook_id=webhook_id)
        deliveries = webhook.deliveries.prefetch_related("attempt_log").order_by("position")
        return Response(
            log_page(
                lambda after, count: list(deliveries.filter(position__gt=after)[:count]),
                limit=request.query["limit"],
                cursor=request.query.get("cursor"),
                serialize=lambda rows: DeliverySerializer(rows, many=True).data,
            )
        )
