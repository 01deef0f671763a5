"""Read-your-writes tokens on the HTTP edge (issue 26 item 3).

A response to a request that appended events carries ``Nexum-Position``: the project position its last
append reached (committed). A caller sends it back as ``Nexum-Min-Position`` on a compile or on any read
(GET, HEAD), which then reads from the read replica only once the replica has replayed the project that far
(``nexum.eventstore.replica``); ``Nexum-Read-From`` says which database answered.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request

from nexum.core.errors import ValidationFailed
from nexum.eventstore import replica
from nexum_web.api.errors import answer_exception

POSITION_HEADER = "Nexum-Position"
MIN_POSITION_HEADER = "Nexum-Min-Position"
READ_FROM_HEADER = "Nexum-Read-From"
SERVER_TIMING_HEADER = "Server-Timing"
POSITION_MAX_DIGITS = 18
POSITION_PATTERN = rf"^[0-9]{{1,{POSITION_MAX_DIGITS}}}$"

MIN_POSITION_PARAMETER = OpenApiParameter(
    MIN_POSITION_HEADER,
    {"type": "string", "pattern": POSITION_PATTERN},
    OpenApiParameter.HEADER,
    required=False,
    description=f"Read-your-writes: the `{POSITION_HEADER}` of your last write's answer. With a read replica "
    "configured, the request reads from it once it has replayed the project that far (waiting a bounded "
    "time), else from the primary. Without a replica it changes nothing.",
)

READ_METHODS = frozenset({"GET", "HEAD"})


class PositionMiddleware:
    """Adds ``Nexum-Position`` to the answer of an API request that wrote in its caller's project, and, with
    a read replica configured, ``Nexum-Read-From: replica|primary`` to the answer of a compile or a read
    (GET, HEAD), which reads from the replica once it has replayed ``Nexum-Min-Position``, with the time
    spent waiting for it (``Server-Timing: replica-wait;dur=<ms>``). A read that failed on the replica is
    read again on the primary (``replica.note_replica_failed``)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        reads = request.method in READ_METHODS
        try:
            required = header_position(request.headers.get(MIN_POSITION_HEADER)) if reads else 0
        except ValidationFailed as error:
            return answer_exception(error, request)
        with replica.tracking_request(reads=reads, min_position=required) as positions:
            response = self.get_response(request)
        if positions.replica_failed:
            with replica.retried_on_primary(positions) as positions:
                response = self.get_response(request)
        project_id = getattr(getattr(request, "user", None), "project_id", None)
        if project_id is not None:
            position = positions.written.get(str(project_id))
            if position is not None:
                response[POSITION_HEADER] = str(position)
        if positions.read_from is not None:
            response[READ_FROM_HEADER] = "replica" if positions.read_from == replica.REPLICA else "primary"
            response[SERVER_TIMING_HEADER] = f"replica-wait;dur={positions.replica_wait_s * 1000:.1f}"
        return response


def min_position(request: Request) -> int:
    """The project position the caller requires a read to include (``Nexum-Min-Position``), 0 if none."""
    return header_position(request.headers.get(MIN_POSITION_HEADER))


def header_position(value: str | None) -> int:
    if value is None:
        return 0
    if not re.fullmatch(POSITION_PATTERN, value):
        raise ValidationFailed(
            f"the {MIN_POSITION_HEADER} header is a project position, a whole number ≥ 0 "
            f"(the {POSITION_HEADER} of an earlier answer), not {value[:40]!r}",
            field=MIN_POSITION_HEADER,
        )
    return int(value)
