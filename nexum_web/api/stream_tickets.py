"""Stream tickets: how a browser follows the event stream (issue 29).

A browser's ``EventSource`` cannot send an ``Authorization`` header, and a bearer token in a URL ends up in
logs and histories. So a caller with a token asks for a ticket (``POST /api/v1/events/stream/tickets``, with
its bearer header, from ``fetch``) and opens the stream with ``?ticket=``. A ticket:

- is bound to the token that asked for it: the stream it opens is that token's project, seen with that token's
  role, counted in that token's share of streams, and closed when that token is revoked;
- opens one stream, once: a second use is 401, so a ticket read from a log or a history is worth nothing;
- lasts ``NEXUM_EVENT_STREAM_TICKET_S`` seconds (default 60) if unused: later it is 401;
- is a credential of the stream endpoint only: ``StreamTicketAuthentication`` is in that view's
  authentication classes and in no other's, so ``?ticket=`` anywhere else authenticates nothing.

Only the sha256 of a ticket is stored (``StreamTicket``); it is redeemed by one conditional update, so two
requests racing with the same ticket cannot both open a stream.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from nexum_web.api.auth import ProjectAgent
from nexum_web.models import StreamTicket
from tasks_app.models import AgentToken
from tasks_app.services.tokens import hash_key

TICKET_PARAMETER = "ticket"
TICKET_PREFIX = "nxst_"


@dataclass(frozen=True)
class IssuedTicket:
    ticket: str
    expires_at: datetime


def stream_ticket_issue(*, caller: ProjectAgent) -> IssuedTicket:
    """A new ticket for ``caller``'s token; expired tickets are deleted on the way (they open nothing)."""
    now = timezone.now()
    StreamTicket.objects.filter(expires_at__lt=now).delete()
    ticket = TICKET_PREFIX + secrets.token_urlsafe(32)
    expires_at = now + timedelta(seconds=settings.NEXUM_EVENT_STREAM_TICKET_S)
    StreamTicket.objects.create(
        secret_sha256=hash_key(ticket),
        token_id=caller.token_id,
        project_id=caller.project_id,
        role=caller.role,
        issued_at=now,
        expires_at=expires_at,
    )
    return IssuedTicket(ticket=ticket, expires_at=expires_at)


def stream_ticket_redeem(*, ticket: str) -> ProjectAgent:
    """The caller a ticket stands for, once: unknown, expired, used or of a revoked token is 401
    ``authentication_failed``, saying which."""
    now = timezone.now()
    secret = hash_key(ticket)
    redeemed = StreamTicket.objects.filter(
        secret_sha256=secret, used_at__isnull=True, expires_at__gte=now
    ).update(used_at=now)
    stored = StreamTicket.objects.filter(secret_sha256=secret).first()
    if stored is None:
        raise exceptions.AuthenticationFailed("unknown stream ticket")
    if not redeemed:
        if stored.used_at is not None:
            raise exceptions.AuthenticationFailed(
                "this stream ticket was used already; a ticket opens one stream: ask for a new one"
            )
        raise exceptions.AuthenticationFailed(
            f"this stream ticket expired (tickets last {settings.NEXUM_EVENT_STREAM_TICKET_S} s): "
            "ask for a new one"
        )
    token = AgentToken.objects.filter(id=stored.token_id, revoked_at__isnull=True).only("name").first()
    if token is None:
        raise exceptions.AuthenticationFailed("the token this stream ticket was issued to is revoked")
    return ProjectAgent(str(stored.token_id), token.name, str(stored.project_id), stored.role)


class StreamTicketAuthentication(authentication.BaseAuthentication):
    """``?ticket=<stream ticket>``, on the event stream only. A request that sends both a ticket and an
    Authorization header is refused: which of the two it meant cannot be guessed."""

    def authenticate(self, request: Request) -> tuple[ProjectAgent, None] | None:
        ticket = request.query_params.get(TICKET_PARAMETER)
        if ticket is None:
            return None
        if authentication.get_authorization_header(request):
            raise exceptions.AuthenticationFailed("send a stream ticket or an Authorization header, not both")
        if not ticket.startswith(TICKET_PREFIX):
            raise exceptions.AuthenticationFailed(
                f"a stream ticket starts with {TICKET_PREFIX!r}; a token is not a ticket"
            )
        return stream_ticket_redeem(ticket=ticket), None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="nexum"'
