"""Webhooks: an operator's configuration, and delivery from the log with retries.

The log is the outbox. A webhook's ``cursor`` is the log position up to which its deliveries are recorded.
Each pass of the dispatcher (``nexum_dispatcher``; the work kind's ``prepare``) calls
``deliveries_record``, which, per active webhook and under a lock on its row, reads the project's events
after the cursor, records one ``WebhookDelivery`` per event (unique per webhook and position, so two
dispatchers never record one twice), moves the cursor and, once committed, sends each delivery to a worker.
The feed's reader never skips an event committed later with a lower position (appends take the log's lock),
so neither does the cursor.

An attempt (``delivery_attempt``, under the delivery's lease) POSTs the event, signed, to the URL through
the same allowlist as ``http_json`` sources (``NEXUM_SOURCE_HTTP_ALLOW``: the host is vetted and the
connection made to the vetted address, no redirect followed), records the attempt, and either marks the
delivery delivered (a 2xx), or schedules the next attempt after ``NEXUM_WEBHOOK_BACKOFF_S`` × 2^(n-1) (at
most ``NEXUM_WEBHOOK_BACKOFF_MAX_S``), or gives up after ``NEXUM_WEBHOOK_MAX_ATTEMPTS``. The dispatcher
sends a retry once it is due (``requested_at``) and unleased, as it sends any request a broker lost: one
send path. So each event reaches a receiver that answers at least once, with the same ``Nexum-Event-Id`` (its
log position) every time.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from nexum.core.errors import NotFound
from nexum.eventstore import store
from nexum.ids import uuid_or_none
from nexum.source_policy import DEFAULT_PORTS, HTTP_ALLOW_SETTING, ConfinementRefused, SourcePolicy
from nexum.sources import PinnedHTTPConnection, PinnedHTTPSConnection
from nexum.work.leases import Lease
from nexum_web.api.views import StoredEventSerializer
from nexum_web.webhooks import signing
from nexum_web.webhooks.models import DELIVERED, FAILED, PENDING, Webhook, WebhookAttempt, WebhookDelivery
from tasks_app.selectors import project_get

logger = logging.getLogger(__name__)

RESPONSE_EXCERPT_BYTES = 500
DUE_TOLERANCE = timedelta(seconds=1)


def _policy() -> SourcePolicy:
    try:
        return SourcePolicy.build(http_allow=settings.NEXUM_SOURCE_HTTP_ALLOW)
    except ValueError as error:
        raise ImproperlyConfigured(f"{HTTP_ALLOW_SETTING}: {error}") from None


# --- configuration (an operator's) ----------------------------------------------------------------------


@dataclass(frozen=True)
class RegisteredWebhook:
    webhook: Webhook
    secret: str  # shown once, in the answer that created the webhook


def check_url(url: str) -> None:
    """An http(s) URL whose host is on ``NEXUM_SOURCE_HTTP_ALLOW``, else 422 ``source_not_allowed`` (400
    for what is not an http(s) URL), naming ``url``."""
    _policy().check_url(url, option="url")


def webhook_register(*, project_id: str, url: str, actor: str, description: str = "") -> RegisteredWebhook:
    """A webhook for the project's events from now on; ``url`` passes ``check_url`` or nothing is written."""
    check_url(url)
    project = project_get(project_id=project_id)
    webhook = Webhook.objects.create(
        project=project,
        url=url,
        description=description,
        secret=signing.new_secret(),
        cursor=store.head_position(),  # appends are serialized: none commits later below the head
        created_by=actor,
    )
    logger.info("webhook %s registered for project %s by %s: %s", webhook.id, project.slug, actor, url)
    return RegisteredWebhook(webhook, webhook.secret)


def webhook_get(*, project_id: str, webhook_id: str) -> Webhook:
    found = uuid_or_none(webhook_id)
    webhook = Webhook.objects.filter(project_id=project_id, id=found).first() if found else None
    if webhook is None:
        raise NotFound(f"no webhook {webhook_id} in this project", field="webhook_id")
    return webhook


def webhook_remove(*, project_id: str, webhook_id: str, actor: str) -> Webhook:
    """Stop a webhook: nothing more is recorded or sent to it (its pending deliveries give up); its
    deliveries and attempts stay for the record. Removing it again changes nothing."""
    webhook = webhook_get(project_id=project_id, webhook_id=webhook_id)
    if not webhook.active:
        return webhook
    now = timezone.now()
    with transaction.atomic():
        Webhook.objects.filter(id=webhook.id).update(active=False, removed_by=actor, removed_at=now)
        webhook.deliveries.filter(state=PENDING).update(state=FAILED, last_error="the webhook was removed")
    logger.info("webhook %s removed by %s", webhook.id, actor)
    webhook.refresh_from_db()
    return webhook


# --- delivery -------------------------------------------------------------------------------------------


def deliveries_record(*, now: datetime | None = None, batch: int = 500) -> int:
    """Record the deliveries of the events appended since each active webhook's cursor (at most ``batch``
    per webhook and pass) and send them once committed. The number recorded."""
    from nexum.work.dispatch import send_on_commit
    from nexum_web.webhooks.tasks import DELIVERY

    now = now or timezone.now()
    recorded = 0
    for webhook_id in Webhook.objects.filter(active=True).values_list("id", flat=True):
        with transaction.atomic():
            webhook = Webhook.objects.select_for_update().filter(id=webhook_id, active=True).first()
            if webhook is None:
                continue
            events = store.read_all(after=webhook.cursor, limit=batch, project_id=str(webhook.project_id))
            if not events:
                continue
            WebhookDelivery.objects.bulk_create(
                [
                    WebhookDelivery(
                        webhook=webhook,
                        project_id=webhook.project_id,
                        position=event.position,
                        event_type=event.event_type,
                        requested_at=now,
                    )
                    for event in events
                ],
                ignore_conflicts=True,
            )
            Webhook.objects.filter(id=webhook.id).update(cursor=events[-1].position)
            positions = [event.position for event in events]
            due = webhook.deliveries.filter(position__in=positions, state=PENDING).values_list(
                "id", flat=True
            )
            for delivery_id in due:
                send_on_commit(DELIVERY, str(delivery_id))
            recorded += len(events)
    return recorded


def _backoff(attempts: int) -> timedelta:
    seconds = settings.NEXUM_WEBHOOK_BACKOFF_S * 2 ** (attempts - 1)
    return timedelta(seconds=min(seconds, settings.NEXUM_WEBHOOK_BACKOFF_MAX_S))


@dataclass(frozen=True)
class Answer:
    status: int | None
    error: str
    excerpt: str
    duration_ms: int

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def delivery_body(delivery: WebhookDelivery) -> bytes:
    """What is POSTed: the event as the feed shows it, with its id and the webhook's."""
    found = store.read_all(after=delivery.position - 1, limit=1, project_id=str(delivery.project_id))
    if not found or found[0].position != delivery.position:
        raise NotFound(f"event {delivery.position} is not in the project's log")
    document = {
        "event_id": str(delivery.position),
        "webhook_id": str(delivery.webhook_id),
        "event": StoredEventSerializer(found[0]).data,
    }
    return json.dumps(document, cls=DjangoJSONEncoder, separators=(",", ":"), ensure_ascii=False).encode()


def delivery_attempt(*, delivery_id: str, lease: Lease | None = None) -> str:
    """One attempt at a pending delivery that is due; its state afterwards (a delivery that is not pending
    or not yet due is left alone: a duplicate message is harmless)."""
    delivery = WebhookDelivery.objects.select_related("webhook").filter(id=delivery_id).first()
    if delivery is None or delivery.state != PENDING:
        return delivery.state if delivery is not None else "missing"
    if delivery.requested_at > timezone.now() + DUE_TOLERANCE:
        return "not_due"
    number = delivery.attempts + 1
    body = delivery_body(delivery)
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Nexum-Webhooks/1",
        signing.SIGNATURE_HEADER: signing.signature(delivery.webhook.secret, body, timestamp),
        signing.EVENT_ID_HEADER: str(delivery.position),
        signing.WEBHOOK_ID_HEADER: str(delivery.webhook_id),
        signing.ATTEMPT_HEADER: str(number),
    }
    started = timezone.now()
    answer = post(delivery.webhook.url, body, headers, timeout_s=settings.NEXUM_WEBHOOK_TIMEOUT_S)
    changes: dict[str, Any] = {
        "attempts": number,
        "last_status": answer.status,
        "last_error": answer.error,
    }
    if answer.ok:
        changes.update(state=DELIVERED, delivered_at=timezone.now())
    elif number >= settings.NEXUM_WEBHOOK_MAX_ATTEMPTS:
        changes.update(state=FAILED)
    else:
        changes.update(requested_at=timezone.now() + _backoff(number))
    with transaction.atomic():
        if lease is not None:
            lease.fence()
        WebhookAttempt.objects.create(
            delivery=delivery,
            number=number,
            attempted_at=started,
            status_code=answer.status,
            error=answer.error,
            duration_ms=answer.duration_ms,
            response_excerpt=answer.excerpt,
        )
        WebhookDelivery.objects.filter(id=delivery.id, state=PENDING).update(**changes)
    state = changes.get("state", PENDING)
    if state == PENDING:
        logger.info(
            "webhook delivery %s (event %s) attempt %d: %s; next at %s",
            delivery.id,
            delivery.position,
            number,
            answer.status or answer.error,
            changes["requested_at"],
        )
    elif state == FAILED:
        logger.warning("webhook delivery %s gave up after %d attempts", delivery.id, number)
    return state


def post(url: str, body: bytes, headers: dict[str, str], *, timeout_s: float) -> Answer:
    """POST ``body`` to ``url`` if the allowlist lets its host be reached now, to the address it vetted;
    an answer, never an exception. Redirects are not followed (a 3xx is a failed attempt)."""
    parts = urllib.parse.urlsplit(url)
    started = time.monotonic()

    def failed(error: str) -> Answer:
        return Answer(None, error[:500], "", int((time.monotonic() - started) * 1000))

    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return failed("refused: not an http(s) URL")
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    try:
        address = _policy().connect_address(parts.hostname, port)
    except ConfinementRefused as refusal:
        return failed(f"refused: {refusal}")
    except (OSError, ValueError):
        return failed(f"cannot resolve {parts.hostname}")
    connection_class = PinnedHTTPSConnection if parts.scheme == "https" else PinnedHTTPConnection
    connection = connection_class(parts.hostname, port, timeout=timeout_s)
    connection.vetted_address = address
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    try:
        connection.request("POST", target, body=body, headers=headers)
        response = connection.getresponse()
        excerpt = response.read(RESPONSE_EXCERPT_BYTES).decode("utf-8", "replace")
    except TimeoutError:
        return failed(f"timed out after {timeout_s:g} s")
    except (OSError, http.client.HTTPException):
        return failed(f"cannot connect to {parts.hostname}:{port}")
    finally:
        connection.close()
    return Answer(response.status, "", excerpt, int((time.monotonic() - started) * 1000))
