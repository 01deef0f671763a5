"""The foundation's endpoints: health and the event feed; the API docs' pages."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.celery import app
from nexum.eventstore import reading
from nexum_web.api.pagination import LogListQuery, log_page, page_schema, validate_project_cursor


class HealthView(APIView):
    """Is the service able to work: can it reach its database and its broker?"""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @extend_schema(
        responses=inline_serializer(
            "Health",
            {
                "status": serializers.CharField(),
                "database": serializers.DictField(),
                "broker": serializers.DictField(),
            },
        )
    )
    def get(self, request: Request) -> Response:
        database = _database_health()
        broker = _broker_health()
        healthy = database["ok"] and broker["ok"]
        return Response(
            {"status": "ok" if healthy else "degraded", "database": database, "broker": broker},
            status=200 if healthy else 503,
        )


def _database_health() -> dict[str, object]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True, "vendor": connection.vendor, "head_position": reading.head_position()}
    except Exception as error:  # any failure to reach the database is what this endpoint reports
        return {"ok": False, "vendor": connection.vendor, "error": str(error)}


def _broker_health() -> dict[str, object]:
    if not settings.CELERY_BROKER_URL:
        return {"ok": True, "mode": "eager"}
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return {"ok": True, "mode": "broker", "transport": conn.transport_cls}
    except Exception as error:  # an unreachable broker is reported, not raised
        return {"ok": False, "mode": "broker", "error": str(error)}


class StoredEventSerializer(serializers.Serializer):
    position = serializers.IntegerField(
        source="project_position", help_text="the event's place in its project's log: gapless, the cursor"
    )
    log_position = serializers.IntegerField(
        source="position", help_text="the event's identity in the whole log (orders nothing across projects)"
    )
    stream_id = serializers.CharField()
    version = serializers.IntegerField()
    type = serializers.CharField(source="event_type")
    schema_version = serializers.IntegerField(source="event.schema_version")
    data = serializers.DictField()
    metadata = serializers.DictField()
    recorded_at = serializers.DateTimeField()


class EventFeedView(APIView):
    """The project's events in position order, for subscribers tailing the log (SPEC E8): the cursor is a
    position in the project's log, so ``?cursor=<last position seen>`` gives what was appended since."""

    query_serializers = {"GET": LogListQuery}

    @extend_schema(responses=page_schema("EventPage", StoredEventSerializer))
    def get(self, request: Request) -> Response:
        project_id = request.user.project_id
        cursor = request.query.get("cursor")
        if cursor is not None:
            validate_project_cursor(project_id, cursor, field="cursor")
        return Response(
            log_page(
                lambda after, count: reading.read_project(project_id, after=after, limit=count),
                limit=request.query["limit"],
                cursor=cursor,
                serialize=lambda rows: StoredEventSerializer(rows, many=True).data,
                position=lambda row: row.project_position,
            )
        )


# The API docs load nothing from another host, not even what their scripts add as they run (Redoc's logo).
DOCS_CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "worker-src 'self' blob:",
    ]
)


def self_contained(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A docs page answered with ``DOCS_CONTENT_SECURITY_POLICY``."""

    @wraps(view)
    def page(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response

    return page
