"""Webhooks: an operator's configuration, and delivery from the log with retries.

Registering and removing a webhook are events (``WebhookRegistered``, ``WebhookRemoved``: what was
configured, by whom; never the secret), each with the webhook's row (its secret and cursor) in the same
transaction.

The log is the outbox. A webhook's ``cursor`` is the log position up to which its deliveries are recorded.
Each pass of the dispatcher (``nexum_dispatcher``; the work kind's ``prepare``) calls
``deliveries_record``, which, per active webhook and under a lock on its row, reads the project's events
after the cursor, records one ``WebhookDelivery`` per event (unique per webhook and position, so two
dispatchers never record one twice) and moves the cursor. The feed's reader never skips an event committed
later with a lower position (appends take the log's lock), so neither does the cursor. The same pass then
sends the deliveries due, at most ``NEXUM_WEBHOOK_IN_FLIGHT_PER_PROJECT`` of one project's at a time, on the
``webhooks`` queue; each finished attempt sends its project's next (``nexum.work.dispatch``). So a project
with thousands of deliveries queued (a receiver slow or down) holds a bounded share of the queue, and
another project's deliveries and every completion and compile (queues of their own) do not wait for it.

An attempt (``delivery_attempt``, under the delivery's lease) is counted before anything is sent: its
number and an attempt row with no outcome are committed first, then the event is POSTed, signed, to the URL
through the same allowlist as ``http_json`` sources (``NEXUM_SOURCE_HTTP_ALLOW``: the host is vetted and the
connection made to the vetted address, no redirect followed), and the outcome is recorded: the delivery is
delivered (a 2xx), or its next attempt is due after ``NEXUM_WEBHOOK_BACKOFF_S`` × 2^(n-1) (at most
``NEXUM_WEBHOOK_BACKOFF_MAX_S``), or it is given up after ``NEXUM_WEBHOOK_MAX_ATTEMPTS``. A worker killed
mid-request leaves its attempt on the record without an outcome, and the redelivery (the lease taken over,
the message sent again) is the next attempt, with the next number. The dispatcher sends a retry once it is
due (``requested_at``) and unleased, as it sends any request a broker lost: one send path. So each event
reaches a receiver that answers at least once, with the same ``Nexum-Delivery-Id`` (and ``Nexum-Event-Id``,
its log position) every time, and ``Nexum-Delivery-Attempt`` counting every attempt that may have reached it.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from nexum.adapters import telemetry
from nexum.adapters.pinned_http import PinnedHTTPConnection, PinnedHTTPSConnection
from nexum.adapters.source_policy import DEFAULT_PORTS, HTTP_ALLOW_SETTING, ConfinementRefused, SourcePolicy
from nexum.core.errors import NotFound
from nexum.core.ids import uuid_or_none
from nexum.core.webhooks import WebhookRegistered, WebhookRemoved, webhook_stream
from nexum.eventstore import reading, store
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


def validate_url(url: str) -> None:
    """An http(s) URL whose host is on ``NEXUM_SOURCE_HTTP_ALLOW``, else 422 ``source_not_allowed`` (400
    for what is not an http(s) URL), naming ``url``."""
    _policy().validate_url(url, option="url")


def webhook_register(*, project_id: str, url: str, actor: str, description: str = "") -> RegisteredWebhook:
    """A webhook for the project's events from its registration on (``WebhookRegistered``, with its row in the
    same transaction); ``url`` passes ``validate_url`` or nothing is written."""
    validate_url(url)
    project = project_get(project_id=project_id)
    webhook_id = uuid.uuid4()
    with transaction.atomic():
        store.append(
            stream_id=webhook_stream(str(webhook_id)),
            events=[WebhookRegistered(webhook_id=str(webhook_id), url=url, description=description)],
            expected_version=0,
            actor=actor,
            project_id=project_id,
        )
        webhook = Webhook.objects.create(
            id=webhook_id,
            project=project,
            url=url,
            description=description,
            secret=signing.new_secret(),
            # The project's appends commit in order: none commits later below its head, which is the
            # registration itself (not sent to the webhook it registers).
            cursor=reading.project_head(project_id)[1],
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
    with transaction.atomic():
        if not Webhook.objects.select_for_update().filter(id=webhook.id, active=True).exists():
            webhook.refresh_from_db()
            return webhook
        store.append(
            stream_id=webhook_stream(str(webhook.id)),
            events=[WebhookRemoved(webhook_id=str(webhook.id))],
            expected_version=None,  # a webhook registered before its registration was an event has none
            actor=actor,
            project_id=project_id,
        )
        Webhook.objects.filter(id=webhook.id).update(
            active=False, removed_by=actor, removed_at=timezone.now()
        )
        webhook.deliveries.filter(state=PENDING).update(state=FAILED, last_error="the webhook was removed")
    logger.info("webhook %s removed by %s", webhook.id, actor)
    webhook.refresh_from_db()
    return webhook


# --- delivery -------------------------------------------------------------------------------------------


def deliveries_record(*, now: datetime | None = None, batch: int = 500) -> int:
    """Record the deliveries of the events appended since each active webhook's cursor (at most ``batch``
    per webhook and pass), due ``now``: the dispatcher's pass sends them. The number recorded."""
    now = now or timezone.now()
    recorded = 0
    for webhook_id in Webhook.objects.filter(active=True).values_list("id", flat=True):
        with transaction.atomic():
            webhook = Webhook.objects.select_for_update().filter(id=webhook_id, active=True).first()
            if webhook is None:
                continue
            events = reading.read_project(str(webhook.project_id), after=webhook.cursor, limit=batch)
            if not events:
                continue
            WebhookDelivery.objects.bulk_create(
                [
                    WebhookDelivery(
                        webhook=webhook,
                        project_id=webhook.project_id,
                        position=event.project_position,
                        event_type=event.event_type,
                        requested_at=now,
                    )
                    for event in events
                ],
                ignore_conflicts=True,
            )
            Webhook.objects.filter(id=webhook.id).update(cursor=events[-1].project_position)
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
    """What is POSTed: the event as the feed shows it, with its id, the delivery's and the webhook's."""
    found = reading.read_project(str(delivery.project_id), after=delivery.position - 1, limit=1)
    if not found or found[0].project_position != delivery.position:
        raise NotFound(f"event {delivery.position} is not in the project's log")
    document = {
        "event_id": str(delivery.position),
        "delivery_id": str(delivery.id),
        "webhook_id": str(delivery.webhook_id),
        "event": StoredEventSerializer(found[0]).data,
    }
    return json.dumps(document, cls=DjangoJSONEncoder, separators=(",", ":"), ensure_ascii=False).encode()


INTERRUPTED = "no outcome recorded: the worker stopped during the attempt"


def delivery_attempt(*, delivery_id: str, lease: Lease | None = None) -> str:
    """One attempt at a pending delivery that is due; its state afterwards (a delivery that is not pending
    or not yet due is left alone: a duplicate message is harmless). The attempt is counted before the
    request is sent (see the module docstring)."""
    delivery = WebhookDelivery.objects.select_related("webhook").filter(id=delivery_id).first()
    if delivery is None or delivery.state != PENDING:
        return delivery.state if delivery is not None else "missing"
    if delivery.requested_at > timezone.now() + DUE_TOLERANCE:
        return "not_due"
    number = delivery.attempts + 1
    if number > settings.NEXUM_WEBHOOK_MAX_ATTEMPTS:  # the last attempt's worker stopped mid-request
        return _give_up_interrupted(delivery, lease)
    body = delivery_body(delivery)
    started = timezone.now()
    with transaction.atomic():
        if lease is not None:
            lease.fence()
        counted = WebhookDelivery.objects.filter(id=delivery.id, state=PENDING, attempts=delivery.attempts)
        if not counted.update(attempts=number):
            return "raced"  # another run counted this attempt: it sends it
        delivery.attempt_log.filter(duration_ms=None).update(error=INTERRUPTED)
        attempt = WebhookAttempt.objects.create(
            delivery=delivery, project_id=delivery.project_id, number=number, attempted_at=started
        )
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Nexum-Webhooks/1",
        signing.SIGNATURE_HEADER: signing.signature(delivery.webhook.secret, body, timestamp),
        signing.DELIVERY_ID_HEADER: str(delivery.id),
        signing.EVENT_ID_HEADER: str(delivery.position),
        signing.WEBHOOK_ID_HEADER: str(delivery.webhook_id),
        signing.ATTEMPT_HEADER: str(number),
    }
    with telemetry.span(
        "nexum.webhook.deliver",
        project_id=str(delivery.project_id),
        delivery_id=str(delivery.id),
        attempt=number,
    ) as traced:
        answer = post(delivery.webhook.url, body, headers, timeout_s=settings.NEXUM_WEBHOOK_TIMEOUT_S)
        traced.set(outcome=_attempt_outcome(answer))
    changes: dict[str, Any] = {"last_status": answer.status, "last_error": answer.error}
    if answer.ok:
        changes.update(state=DELIVERED, delivered_at=timezone.now())
    elif number >= settings.NEXUM_WEBHOOK_MAX_ATTEMPTS:
        changes.update(state=FAILED)
    else:
        changes.update(requested_at=timezone.now() + _backoff(number))
    with transaction.atomic():
        if lease is not None:
            lease.fence()
        WebhookAttempt.objects.filter(id=attempt.id).update(
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


def _attempt_outcome(answer: Answer) -> str:
    """What an attempt's span says came of it: ``delivered``, ``http_<status>`` or ``unreachable``."""
    if answer.ok:
        return "delivered"
    return f"http_{answer.status}" if answer.status is not None else "unreachable"


def _give_up_interrupted(delivery: WebhookDelivery, lease: Lease | None) -> str:
    """Every attempt was used, the last without an outcome: the delivery is given up."""
    with transaction.atomic():
        if lease is not None:
            lease.fence()
        delivery.attempt_log.filter(duration_ms=None).update(error=INTERRUPTED)
        WebhookDelivery.objects.filter(id=delivery.id, state=PENDING).update(
            state=FAILED, last_error=INTERRUPTED
        )
    logger.warning("webhook delivery %s gave up after %d attempts", delivery.id, delivery.attempts)
    return FAILED


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
