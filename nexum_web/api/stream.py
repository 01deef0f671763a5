"""The event stream: the project's events pushed as Server-Sent Events (issue 18).

``GET /api/v1/events/stream`` sends every event of the caller's project after a position, in log order, as
one SSE message each (``id:`` the event's position in the project's log, ``event:`` its type, ``data:`` the
event as the feed shows it), then keeps polling the log and sends what is appended. Where it starts: the
``Last-Event-ID`` header (a reconnecting client's last id), else ``?after=`` (default 0, the log's start); one
past the project's last event is 404 ``not_found`` (a position kept from before positions were counted per
project, issue 26). A project's positions are gapless and committed in order (its append lock), so a reader
resuming after position P misses nothing committed later: across reconnects each event arrives once, in
order.

A connection is bounded: it closes after ``?timeout=`` seconds, at most (and by default)
``NEXUM_EVENT_STREAM_MAX_S``, so a gunicorn thread is never held for good; ``timeout=0`` sends what is there
and closes. The client reconnects with ``Last-Event-ID`` (an ``EventSource`` does so by itself, after the
``retry:`` the stream announces). While idle, a comment line is sent every ``NEXUM_EVENT_STREAM_HEARTBEAT_S``
so proxies keep the connection open.

The token is checked again before every read of the log: once it is revoked, the stream sends one ``event:
error`` message (``authentication_failed`` in the one error shape) and closes, and a reconnection is 401. A
database outage while the stream is open ends it the same way (``database_unavailable``).

Open streams are bounded per token, in all and per process (``nexum_web.api.stream_slots``): a stream past a
bound is refused (429 ``too_many_streams`` or 503 ``streams_at_capacity``, with ``Retry-After``) before it
starts, and an admitted one holds its place until its response is closed.

A browser's ``EventSource`` cannot send the bearer header: it opens the stream with a single-use ticket,
``?ticket=`` (``nexum_web.api.stream_tickets``), which ``POST /api/v1/events/stream/tickets`` issues to a
token. The ticket is accepted here and nowhere else.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db import DatabaseError
from django.http import StreamingHttpResponse
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import renderers, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nexum.core.errors import ValidationFailed
from nexum.eventstore import reading
from nexum_web.api.auth import AgentTokenAuthentication
from nexum_web.api.errors import database_outage, database_unavailable, error_body
from nexum_web.api.pagination import MAX_POSITION, validate_project_cursor
from nexum_web.api.stream_slots import StreamSlot, stream_slot_take
from nexum_web.api.stream_tickets import TICKET_PARAMETER, StreamTicketAuthentication, stream_ticket_issue
from nexum_web.api.strict import StrictQuery
from nexum_web.api.views import StoredEventSerializer
from tasks_app.selectors import token_in_force

LAST_EVENT_ID = "Last-Event-ID"
BATCH = 500
RETRY_MS = 1000


class EventStreamRenderer(renderers.BaseRenderer):
    """Lets a client ask for ``text/event-stream``; the stream itself is written by the view."""

    media_type = "text/event-stream"
    format = "event-stream"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        return json.dumps(data).encode()


# One message of the stream, as OpenAPI before 3.2 describes an event stream: each event's members.
SSE_EVENT = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "the event's position in the project's log"},
        "event": {"type": "string", "description": "the event's type"},
        "data": {"type": "string", "description": "the event as the feed shows it, JSON"},
        "retry": {"type": "integer", "description": "how long a client waits before reconnecting, in ms"},
    },
}


class EventStreamQuery(StrictQuery):
    after = serializers.IntegerField(
        min_value=0,
        max_value=MAX_POSITION,
        default=0,
        help_text="start after this position in the project's log (Last-Event-ID wins)",
    )
    timeout = serializers.IntegerField(
        min_value=0,
        max_value=86_400,
        required=False,
        help_text="seconds before the stream closes (0: send what is there and close); at most, and by "
        "default, NEXUM_EVENT_STREAM_MAX_S",
    )
    ticket = serializers.CharField(
        required=False, help_text="a stream ticket, instead of the Authorization header (a browser's)"
    )


def _last_event_id(request: Request) -> int | None:
    header = request.headers.get(LAST_EVENT_ID)
    if header is None:
        return None
    if not header.isascii() or not header.isdigit() or int(header) > MAX_POSITION:
        raise ValidationFailed(
            f"{LAST_EVENT_ID} is a position in the project's log (a non-negative integer)",
            field=LAST_EVENT_ID,
        )
    return int(header)


class EventStreamView(APIView):
    """The project's events as Server-Sent Events, resumable with Last-Event-ID (see the module docstring)."""

    authentication_classes = [StreamTicketAuthentication, AgentTokenAuthentication]
    renderer_classes = [renderers.JSONRenderer, EventStreamRenderer]
    query_serializers = {"GET": EventStreamQuery}
    error_statuses = {"GET": (429,)}

    @extend_schema(
        parameters=[
            # The media type is chosen by the Accept header; DRF's ?format= override is not a parameter here.
            OpenApiParameter("format", exclude=True),
            # The ticket is a credential: the streamTicket security scheme documents it.
            OpenApiParameter(TICKET_PARAMETER, exclude=True),
            OpenApiParameter(
                LAST_EVENT_ID,
                {"type": "integer", "minimum": 0, "maximum": MAX_POSITION},
                OpenApiParameter.HEADER,
                required=False,
                description="resume after this position in the project's log (the last `id:` received); "
                "wins over `after`",
            ),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                SSE_EVENT,
                description="`retry: 1000`, then per event `id: <position>`, `event: <type>`, `data: <the "
                "event as the feed shows it, JSON>`; `: keep-alive` comments while idle; closes after the "
                "timeout: reconnect with Last-Event-ID",
            )
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        resume = _last_event_id(request)
        after = request.query["after"] if resume is None else resume
        validate_project_cursor(
            request.user.project_id, after, field="after" if resume is None else LAST_EVENT_ID
        )
        limit = settings.NEXUM_EVENT_STREAM_MAX_S
        timeout = 0 if request.method == "HEAD" else min(request.query.get("timeout", limit), limit)
        slot = stream_slot_take(
            token_id=request.user.token_id, project_id=request.user.project_id, lasts_s=timeout
        )
        if request.method == "HEAD":  # answered as GET would be (429 when full), but no body holds the place
            slot.release()
        frames = _frames(request.user.project_id, request.user.token_id, after, time.monotonic() + timeout)
        response = StreamingHttpResponse(
            _HeldFrames(frames, slot), content_type="text/event-stream; charset=utf-8"
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # a proxy passes each message on at once
        return response

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(response, Response):  # an error: always the JSON error shape
            request.accepted_renderer = renderers.JSONRenderer()
            request.accepted_media_type = renderers.JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


class StreamTicketSerializer(serializers.Serializer):
    ticket = serializers.CharField(help_text="opens one stream, once: `GET /api/v1/events/stream?ticket=…`")
    expires_at = serializers.DateTimeField(help_text="unused after this, the ticket is refused (401)")
    stream_url = serializers.CharField(help_text="the stream's path with the ticket")


class StreamTicketView(APIView):
    """Issues a stream ticket to the caller's token (see ``nexum_web.api.stream_tickets``)."""

    @extend_schema(
        summary="A single-use ticket to open the event stream without an Authorization header",
        description="For a browser's `EventSource`, which cannot send the bearer header: "
        "`new EventSource(stream_url)`. The ticket opens one stream of your project with your token's role, "
        "once, within NEXUM_EVENT_STREAM_TICKET_S seconds (default 60); used, expired or of a revoked token "
        "it is 401. To reconnect, ask for a new ticket and pass `after=<the last id received>`.",
        request=None,
        responses={201: StreamTicketSerializer},
    )
    def post(self, request: Request) -> Response:
        issued = stream_ticket_issue(caller=request.user)
        url = reverse("v1:event-stream") + "?" + urlencode({TICKET_PARAMETER: issued.ticket})
        body = {"ticket": issued.ticket, "expires_at": issued.expires_at, "stream_url": url}
        return Response(StreamTicketSerializer(body).data, status=201)


class _HeldFrames:
    """A stream's frames holding its slot: Django closes a streaming answer's content when the server is done
    with it (the last frame sent, the client gone, the server stopping), and closing frees the slot."""

    def __init__(self, frames: Iterator[str], slot: StreamSlot) -> None:
        self._frames, self._slot = frames, slot

    def __iter__(self) -> _HeldFrames:
        return self

    def __next__(self) -> str:
        return next(self._frames)

    def close(self) -> None:
        try:
            self._frames.close()
        finally:
            self._slot.release()


def _error_frame(code: str, message: str) -> str:
    return f"event: error\ndata: {json.dumps(error_body(code, message), separators=(',', ':'))}\n\n"


def _frames(project_id: str, token_id: str, after: int, deadline: float) -> Iterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    try:
        yield from _events(project_id, token_id, after, deadline)
    except DatabaseError as error:
        if not database_outage(error):
            raise
        unavailable = database_unavailable()
        yield _error_frame(unavailable.code, unavailable.message)


def _events(project_id: str, token_id: str, after: int, deadline: float) -> Iterator[str]:
    position = after
    idle_since = time.monotonic()
    while True:
        if not token_in_force(token_id=token_id):
            yield _error_frame("authentication_failed", "the token was revoked; the stream is closed")
            return
        events = reading.read_project(project_id, after=position, limit=BATCH)
        for event in events:
            data = json.dumps(StoredEventSerializer(event).data, ensure_ascii=False, separators=(",", ":"))
            yield f"id: {event.project_position}\nevent: {event.event_type}\ndata: {data}\n\n"
            position = event.project_position
        now = time.monotonic()
        if events:
            idle_since = now
        if len(events) == BATCH and now < deadline:
            continue
        if now >= deadline:
            return
        if now - idle_since >= settings.NEXUM_EVENT_STREAM_HEARTBEAT_S:
            yield ": keep-alive\n\n"
            idle_since = now
        time.sleep(min(settings.NEXUM_EVENT_STREAM_POLL_S, deadline - now))
